//! [`StreamPoolBuilder`]: the settings of a [`StreamPool`], checked and turned into a running
//! pool by [`StreamPoolBuilder::build`].

use std::fmt;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;

use super::{Connector, Counters, Shared, StreamPool};
use crate::error::ConfigError;
use crate::pool::settings::{self, Names, Settings};
use crate::slots::{Capacity, SlotTable};
use crate::sync::Arc;

/// Builder for a [`StreamPool`]; see [`StreamPool::builder`].
pub struct StreamPoolBuilder<C> {
    connector: C,
    max_streams: Option<usize>,
    max_queue_depth: usize,
    min_streams: usize,
    settings: Settings,
}

impl<C: Connector> StreamPoolBuilder<C> {
    /// The defaults; see [`StreamPool::builder`].
    pub(super) fn new(connector: C) -> Self {
        StreamPoolBuilder {
            connector,
            max_streams: None,
            max_queue_depth: 8,
            min_streams: 0,
            settings: Settings::new(Duration::from_secs(10), Duration::from_secs(1)),
        }
    }

    settings::setters! {
        idle_timeout: "How long a stream may sit with nothing in flight before the reaper closes \
                       it. Default: 10 s.";
        reap_interval: "How often the background reaper runs [`StreamPool::reap`]. Default: \
                        every second.";
        clock: "The clock idle time and the breaker's backoff are measured with. Default: \
                `quanta::Clock::new()`.";
        breaker: "Circuit breaker: after `consecutive_failures` connect failures in a row, \
                  acquires that would open a new stream fail fast with \
                  [`AcquireError::Unavailable`](crate::AcquireError::Unavailable) for `backoff` \
                  (on the pool's clock); then one probe connect is let through. Default: off.";
    }

    /// Opens `n` streams at build and keeps at least `n` open: the reaper does not close
    /// them when idle and reopens any that failed. Default: 0.
    pub fn min_streams(mut self, n: usize) -> Self {
        self.min_streams = n;
        self
    }

    /// Bounds the number of streams; acquires wait when all are full. Default: unbounded.
    pub fn max_streams(mut self, max: usize) -> Self {
        self.max_streams = Some(max);
        self
    }

    /// No bound on the number of streams (the default); acquires never wait.
    pub fn unbounded(mut self) -> Self {
        self.max_streams = None;
        self
    }

    /// Requests in flight per stream. Default: 8.
    pub fn max_queue_depth(mut self, depth: usize) -> Self {
        self.max_queue_depth = depth;
        self
    }

    /// Builds the pool. Must be called within a tokio runtime (drivers and the reaper are
    /// spawned on it).
    ///
    /// # Errors
    /// [`ConfigError`] for a zero depth or stream count, a zero reap interval, values too
    /// large, or no tokio runtime.
    pub fn build(self) -> Result<StreamPool<C>, ConfigError> {
        if self.max_queue_depth == 0 {
            return Err(ConfigError::Zero("max_queue_depth"));
        }
        let depth = u32::try_from(self.max_queue_depth).map_err(|_| ConfigError::TooLarge {
            name: "max_queue_depth",
            value: self.max_queue_depth as u64,
            max: crate::slots::MAX_LOAD.into(),
        })?;
        self.settings.check(Names::PLAIN)?;
        let capacity = match self.max_streams {
            Some(0) => return Err(ConfigError::Zero("max_streams")),
            Some(n) => Capacity::Bounded(n),
            None => Capacity::Unbounded,
        };
        let table = SlotTable::new(capacity, depth).map_err(|e| match e {
            ConfigError::TooLarge { value, max, .. } if self.max_streams.is_some() => {
                ConfigError::TooLarge {
                    name: if value == u64::from(depth) {
                        "max_queue_depth"
                    } else {
                        "max_streams"
                    },
                    value,
                    max,
                }
            }
            other => other,
        })?;
        if let Some(max) = self.max_streams {
            if self.min_streams > max {
                return Err(ConfigError::Inverted {
                    low: "min_streams",
                    low_value: self.min_streams as u64,
                    high: "max_streams",
                    high_value: max as u64,
                });
            }
        }
        let runtime = Handle::try_current().map_err(|_| ConfigError::Missing("tokio runtime"))?;
        let (shutdown, _) = watch::channel(false);
        let clock = self.settings.clock_or(quanta::Clock::new);
        let base = clock.now();
        let shared = Arc::new(Shared {
            table,
            connector: self.connector,
            runtime: runtime.clone(),
            shutdown,
            clock,
            base,
            idle_timeout: self.settings.idle_timeout,
            counters: Counters::default(),
            breaker: self.settings.breaker(),
            min_streams: self.min_streams,
        });
        shared.top_up();
        let reaper = self
            .settings
            .start_reaper(Some(&runtime), &shared, |shared| {
                shared.reap(shared.clock.now());
            })?;
        Ok(StreamPool { shared, reaper })
    }
}

impl<C> fmt::Debug for StreamPoolBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPoolBuilder")
            .field("max_streams", &self.max_streams)
            .field("max_queue_depth", &self.max_queue_depth)
            .field("min_streams", &self.min_streams)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
