//! [`StreamPoolBuilder`]: the settings of a [`StreamPool`], checked and turned into a running
//! pool by [`StreamPoolBuilder::build`].

use std::fmt;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;

use super::{Counters, Shared, StreamConnector, StreamPool};
use crate::error::ConfigError;
use crate::pool::settings::{self, Names, Settings};
use crate::protocol::slots::{Capacity, SlotTable, Windows, MAX_LOAD, MAX_SLOTS};
use crate::sync::Arc;

/// The most streams [`StreamPoolBuilder::min_streams`] accepts: each is opened at build and
/// kept open, so memory follows it (a few KiB a stream, plus what the connector holds).
pub const MAX_MIN_STREAMS: usize = 1024;

/// Builder for a [`StreamPool`]; see [`StreamPool::builder`].
///
/// Every value a setter accepts builds a pool that runs, with memory that follows what is used:
/// a bounded pool allocates its slots in segments as streams open, and a stream reserves
/// nothing for its queue depth. What is refused is a [`ConfigError`] naming the setter.
///
/// | setter | default | accepted |
/// | --- | --- | --- |
/// | `max_queue_depth` | 8 | 1 ..= `MAX_LOAD` (2³¹ − 1) |
/// | `max_streams` / `unbounded` | unbounded | 1 ..= `MAX_SLOTS` (2²⁴) |
/// | `min_streams` | 0 | 0 ..= [`MAX_MIN_STREAMS`], and at most `max_streams` |
/// | `idle_timeout` | 10 s | above zero |
/// | `reap_interval` | 1 s (inside a runtime) | above zero, or `None` |
/// | `open_timeout` | 10 s | above zero, or `None` |
/// | `stall_timeout` | 60 s | above zero, or `None` |
/// | `breaker` | off | a threshold of at least 1 |
///
/// `open_timeout` and `stall_timeout` fire on tokio's timer, from each stream's driver, when
/// their setting says (tokio's timer has millisecond resolution, and a busy runtime runs the
/// driver when it can): `reap_interval` paces only idle reaping, and the deadlines' backstop
/// that fires them where the runtime has no time driver.
pub struct StreamPoolBuilder<C> {
    connector: C,
    max_streams: Option<usize>,
    max_queue_depth: usize,
    min_streams: usize,
    open_timeout: Option<Duration>,
    stall_timeout: Option<Duration>,
    settings: Settings,
}

impl<C: StreamConnector> StreamPoolBuilder<C> {
    /// The defaults; see [`StreamPool::builder`].
    pub(super) fn new(connector: C) -> Self {
        StreamPoolBuilder {
            connector,
            max_streams: None,
            max_queue_depth: 8,
            min_streams: 0,
            open_timeout: Some(Duration::from_secs(10)),
            stall_timeout: Some(Duration::from_secs(60)),
            settings: Settings::new(Duration::from_secs(10), Duration::from_secs(1)),
        }
    }

    settings::setters! {
        idle_timeout: "How long a stream may sit with nothing in flight before the reaper closes \
                       it. Default: 10 s.";
        reap_interval: "How often the background reaper runs [`StreamPool::reap`]: it paces \
                        idle reaping; `open_timeout` and `stall_timeout` do not wait for it (each \
                        stream's driver times them). Default: every second.";
        clock: "The clock idle time and the breaker's backoff are measured with (the open and \
                stall timeouts run on tokio's timer; the reaper's backstop for them reads this \
                clock), and acquires' waits \
                ([`StreamStats::wait_time`](super::StreamStats::wait_time)). Default: \
                `Clock::new()`.";
        name: "The pool's name: the `pool` label of its wait histogram, \
               `slotpool_stream_wait_seconds` (one sample per acquire that waited for room, \
               the waits [`StreamStats::wait_time`](super::StreamStats::wait_time) adds up).";
        breaker: "Circuit breaker: after `consecutive_failures` connect failures in a row, \
                  acquires that would open a new stream fail fast with \
                  [`AcquireError::Unavailable`](crate::AcquireError::Unavailable) for `backoff` \
                  (on the pool's clock); then one probe connect is let through. Default: off.";
    }

    /// Opens `n` streams at build and keeps at least `n` open: the reaper does not close
    /// them when idle and reopens any that failed. Default: 0; at most [`MAX_MIN_STREAMS`]
    /// and at most `max_streams`.
    pub fn min_streams(mut self, n: usize) -> Self {
        self.min_streams = n;
        self
    }

    /// Bounds the number of streams; acquires wait when all are full. Default: unbounded.
    /// At most `MAX_SLOTS`; slots are allocated as streams open, not for the bound.
    pub fn max_streams(mut self, max: usize) -> Self {
        self.max_streams = Some(max);
        self
    }

    /// No bound on the number of streams (the default); acquires never wait.
    pub fn unbounded(mut self) -> Self {
        self.max_streams = None;
        self
    }

    /// Requests in flight per stream. Default: 8; at most `MAX_LOAD`. Nothing is reserved
    /// per stream for the depth: a stream's bookkeeping grows with the requests it carries.
    pub fn max_queue_depth(mut self, depth: usize) -> Self {
        self.max_queue_depth = depth;
        self
    }

    /// How long a stream may take to open (the connector's `connect` to finish) before its
    /// callers fail with [`RequestError::OpenTimeout`](super::RequestError::OpenTimeout), not
    /// sent, and the slot is freed; it counts as a connect failure for the breaker. Default:
    /// 10 s; `None`: wait for ever.
    ///
    /// Counted from the stream's start (the acquire that opened it), not from each caller's
    /// acquire: a caller that joins an opening stream fails with it. The stream's driver keeps
    /// the deadline on tokio's timer, so its callers fail `timeout` after the start (within the
    /// timer's millisecond) whatever `reap_interval` is. Where the runtime has no time driver
    /// (built without `enable_time`) only the reaper's pass checks it, on the pool's clock:
    /// then at the first pass at least `timeout` after the start (see [`StreamPool::reap`]).
    /// Zero is a [`ConfigError::Zero`].
    pub fn open_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.open_timeout = timeout;
        self
    }

    /// How long a stream with requests outstanding may receive nothing before it is declared
    /// hung: every request on it fails with
    /// [`RequestError::Stalled`](super::RequestError::Stalled) (maybe applied if sent, not
    /// sent if queued) and the slot is freed. Default: 60 s; `None`: never.
    ///
    /// Set it to a few times your slowest response: a stream whose every outstanding request
    /// legitimately takes longer than this is closed as hung. The silence is counted from the
    /// last thing the stream received, or from when it went busy if that is later (a request
    /// sent while others are outstanding does not restart it). The stream's driver keeps the
    /// deadline on tokio's timer, so the stall is declared `timeout` after the silence began
    /// (within the timer's millisecond) whatever `reap_interval` is. Where the runtime has no
    /// time driver only the reaper's pass checks it, on the pool's clock: the first pass that
    /// finds the stream busy and silent notes the time, a pass at least `timeout` later with
    /// still nothing received declares it (within `timeout` + one `reap_interval` of silence).
    /// Zero is a [`ConfigError::Zero`].
    pub fn stall_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// Builds the pool. Must be called within a tokio runtime (drivers and the reaper are
    /// spawned on it).
    ///
    /// # Errors
    /// [`ConfigError`] naming the setter: a zero depth, stream count, timeout or reap
    /// interval, values above their maximum (see the table on [`StreamPoolBuilder`]),
    /// `min_streams` above `max_streams`, or no tokio runtime.
    pub fn build(self) -> Result<StreamPool<C>, ConfigError> {
        let too_large = |name, value: usize, max: u64| ConfigError::TooLarge {
            name,
            value: value as u64,
            max,
        };
        if self.max_queue_depth == 0 {
            return Err(ConfigError::Zero("max_queue_depth"));
        }
        let depth = u32::try_from(self.max_queue_depth)
            .ok()
            .filter(|depth| *depth <= MAX_LOAD)
            .ok_or_else(|| too_large("max_queue_depth", self.max_queue_depth, MAX_LOAD.into()))?;
        self.settings.check(Names::PLAIN)?;
        for (name, timeout) in [
            ("open_timeout", self.open_timeout),
            ("stall_timeout", self.stall_timeout),
        ] {
            if timeout == Some(Duration::ZERO) {
                return Err(ConfigError::Zero(name));
            }
        }
        let capacity = match self.max_streams {
            Some(0) => return Err(ConfigError::Zero("max_streams")),
            Some(n) if n > MAX_SLOTS => return Err(too_large("max_streams", n, MAX_SLOTS as u64)),
            Some(n) => Capacity::Bounded(n),
            None => Capacity::Unbounded,
        };
        if self.min_streams > MAX_MIN_STREAMS {
            return Err(too_large(
                "min_streams",
                self.min_streams,
                MAX_MIN_STREAMS as u64,
            ));
        }
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
        // Every value is checked above, under the setter's name; the table's own checks
        // (which speak of `max_load` and `slots`) cannot fail now.
        let table = SlotTable::new(capacity, depth)?;
        let runtime = Handle::try_current().map_err(|_| ConfigError::Missing("tokio runtime"))?;
        let (shutdown, _) = watch::channel(false);
        let clock = self.settings.clock_or(quanta::Clock::new);
        let base = clock.now();
        let timers = (self.open_timeout.is_some() || self.stall_timeout.is_some())
            && super::deadline::timers_available();
        let shared = Arc::new(Shared {
            table,
            connector: self.connector,
            runtime: runtime.clone(),
            shutdown,
            clock,
            base,
            idle_timeout: self.settings.idle_timeout,
            open_timeout: self.open_timeout,
            stall_timeout: self.stall_timeout,
            timers,
            counters: Counters::new(self.settings.name.clone()),
            breaker: self.settings.breaker(),
            min_streams: self.min_streams,
            windows: Windows::new(),
        });
        shared.top_up();
        let reaper = self
            .settings
            .start_reaper(Some(&runtime), &shared, |shared| {
                shared.reap(shared.clock.now());
            })?;
        Ok(StreamPool {
            shared: std::mem::ManuallyDrop::new(shared),
            reaper,
        })
    }
}

impl<C> fmt::Debug for StreamPoolBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPoolBuilder")
            .field("max_streams", &self.max_streams)
            .field("max_queue_depth", &self.max_queue_depth)
            .field("min_streams", &self.min_streams)
            .field("open_timeout", &self.open_timeout)
            .field("stall_timeout", &self.stall_timeout)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
