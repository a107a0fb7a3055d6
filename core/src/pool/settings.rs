//! The settings every pool shares, in one place: idle timeout, background reaping, the clock,
//! the circuit breaker and the pool's name.
//!
//! Each pool's builder holds a [`Settings`] and gets its setters from [`setters!`], so the
//! setters read the same, validate the same and start the reaper the same way in every pool;
//! a new pool cannot drift. A pool passes its own defaults, the names its setters have (R3's
//! session pool says `max_idle_time` and `reap_every`, as its users know them), and the
//! sentence that says what "idle" means for its resource.
//!
//! # The rules, once
//!
//! * **Reaping.** A pool reaps in the background every `reap_interval` (a pool-specific
//!   default) when it is built inside a tokio runtime. Built outside one, the default reaper
//!   is off and the pool's `reap(now)` is the caller's to call; asking for an interval there is
//!   [`ConfigError::Missing`]`("tokio runtime")`. A zero interval is [`ConfigError::Zero`].
//! * **Clock.** Idle time is measured on the injected `Clock` (default
//!   `Clock::new()`). A background reaper ticks on tokio's timer but reads *that* clock, so
//!   with `Clock::mock()` it reaps only as far as the mock has been advanced; tests usually
//!   turn the reaper off and call `reap(now)` themselves.
//! * **Idle timeout.** Zero is [`ConfigError::Zero`]: a resource would be closed the moment it
//!   went idle. To keep resources, turn the reaper off instead.
//! * **Breaker.** `breaker(n, backoff)` with `n = 0` is [`ConfigError::Zero`]`("breaker")`.
//! * **Name.** `name(..)` labels what the pool records itself through the `metrics` facade (its
//!   wait histogram, `pool = name`); without it the label is `"default"` (see
//!   `crate::pool::wait`). Any text is accepted, the empty string too.

use std::borrow::Cow;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::AbortHandle;

use crate::error::ConfigError;
use crate::pool::reap::{nanos, spawn_reaper};
use crate::pool::wait::DEFAULT_NAME;
use crate::protocol::breaker::Breaker;
use crate::sync::Arc;

/// How the background reaper was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reap {
    /// Not asked: the pool's default interval, if built inside a tokio runtime.
    Default(Duration),
    /// `reap_interval(Some(d))`: every `d`; needs a tokio runtime.
    Every(Duration),
    /// `reap_interval(None)`: no background reaper.
    Off,
}

/// The names a pool's builder gives the shared setters, for errors that name what the user
/// wrote.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    /// The idle timeout's setter.
    pub(crate) idle_timeout: &'static str,
    /// The reap interval's setter.
    pub(crate) reap_interval: &'static str,
}

impl Names {
    /// `idle_timeout` and `reap_interval`.
    pub(crate) const PLAIN: Names = Names {
        idle_timeout: "idle_timeout",
        reap_interval: "reap_interval",
    };
}

/// The settings every pool's builder shares. See the [module documentation](self).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// How long a resource may sit unused before the reaper closes it.
    pub(crate) idle_timeout: Duration,
    /// The background reaper.
    pub(crate) reap: Reap,
    /// The clock idle time is measured with; `None` until a setter or the pool chooses.
    pub(crate) clock: Option<quanta::Clock>,
    /// `(consecutive failures, backoff)`, if the pool has a breaker and one was asked for.
    pub(crate) breaker: Option<(u32, Duration)>,
    /// The pool's name: the `pool` label of what it records itself (its wait histogram).
    pub(crate) name: Cow<'static, str>,
}

impl Settings {
    /// A pool's defaults.
    pub(crate) fn new(idle_timeout: Duration, reap_interval: Duration) -> Self {
        Settings {
            idle_timeout,
            reap: Reap::Default(reap_interval),
            clock: None,
            breaker: None,
            name: Cow::Borrowed(DEFAULT_NAME),
        }
    }

    /// The `reap_interval` setter's effect.
    pub(crate) fn set_reap_interval(&mut self, interval: Option<Duration>) {
        self.reap = interval.map_or(Reap::Off, Reap::Every);
    }

    /// Checks what can be checked before the pool exists.
    ///
    /// # Errors
    /// A zero idle timeout, reap interval or breaker threshold.
    pub(crate) fn check(&self, names: Names) -> Result<(), ConfigError> {
        if self.idle_timeout.is_zero() {
            return Err(ConfigError::Zero(names.idle_timeout));
        }
        if self.reap == Reap::Every(Duration::ZERO) {
            return Err(ConfigError::Zero(names.reap_interval));
        }
        if matches!(self.breaker, Some((0, _))) {
            return Err(ConfigError::Zero("breaker"));
        }
        Ok(())
    }

    /// The clock: the one set, else `fallback` (a nested pool shares its parent's).
    pub(crate) fn clock_or(&self, fallback: impl FnOnce() -> quanta::Clock) -> quanta::Clock {
        self.clock.clone().unwrap_or_else(fallback)
    }

    /// The breaker asked for, or one that never opens.
    pub(crate) fn breaker(&self) -> Breaker {
        match self.breaker {
            Some((threshold, backoff)) => Breaker::new(threshold, nanos(backoff)),
            None => Breaker::new(0, 0),
        }
    }

    /// The interval the background reaper will run at, given the runtime the pool is built
    /// in (if any): `None` when there will be no background reaper.
    ///
    /// # Errors
    /// An interval was asked for outside a tokio runtime.
    /// The background reap interval asked for (or the default), wherever the pool is built:
    /// for pools that start their task on first use inside a runtime.
    pub(crate) fn reap_every(&self) -> Option<Duration> {
        match self.reap {
            Reap::Default(every) | Reap::Every(every) => Some(every),
            Reap::Off => None,
        }
    }

    pub(crate) fn reap_interval(
        &self,
        runtime: Option<&Handle>,
    ) -> Result<Option<Duration>, ConfigError> {
        match (self.reap, runtime) {
            (Reap::Off, _) | (Reap::Default(_), None) => Ok(None),
            (Reap::Default(every) | Reap::Every(every), Some(_)) => Ok(Some(every)),
            (Reap::Every(_), None) => Err(ConfigError::Missing("tokio runtime")),
        }
    }

    /// Starts the background reaper, if there is to be one: `tick` runs every interval with
    /// the pool's shared state while it lives (the task holds only a `Weak` between ticks).
    ///
    /// # Errors
    /// An interval was asked for outside a tokio runtime.
    pub(crate) fn start_reaper<S: Send + Sync + 'static>(
        &self,
        runtime: Option<&Handle>,
        shared: &Arc<S>,
        tick: impl Fn(&Arc<S>) + Send + 'static,
    ) -> Result<Option<AbortHandle>, ConfigError> {
        self.start_reaper_within(runtime, shared, None, tick)
    }

    /// [`Settings::start_reaper`], ticking at least every `at_most` (a pool's watch of holds
    /// needs its passes that close) if the reaper runs at all.
    ///
    /// # Errors
    /// As [`Settings::start_reaper`].
    pub(crate) fn start_reaper_within<S: Send + Sync + 'static>(
        &self,
        runtime: Option<&Handle>,
        shared: &Arc<S>,
        at_most: Option<Duration>,
        tick: impl Fn(&Arc<S>) + Send + 'static,
    ) -> Result<Option<AbortHandle>, ConfigError> {
        Ok(match (self.reap_interval(runtime)?, runtime) {
            (Some(every), Some(runtime)) => {
                let every = at_most.map_or(every, |at_most| every.min(at_most));
                Some(spawn_reaper(runtime, Arc::downgrade(shared), every, tick))
            }
            _ => None,
        })
    }
}

/// The shared setters, for a builder whose [`Settings`] is in the field `settings`. Each
/// clause names the setter (a pool may use its own name, such as R3's `max_idle_time`) and
/// gives the pool's sentence for it, ending with its default; the rules that every pool
/// shares are appended here.
///
/// ```text
/// impl<C: Connector> StreamPoolBuilder<C> {
///     settings::setters! {
///         idle_timeout: "How long a stream may sit with nothing in flight before the reaper \
///                        closes it. Default: 10 s.";
///         reap_interval: "How often [`StreamPool::reap`] runs in the background. Default: \
///                         every second.";
///         clock: "The clock idle time is measured with.";
///         breaker: "...";
///     }
/// }
/// ```
macro_rules! setters {
    ($($setter:ident: $what:literal;)*) => {
        $(crate::pool::settings::setters!(@one $setter $what);)*
    };
    (@one idle_timeout $what:literal) => {
        crate::pool::settings::setters!(@idle idle_timeout $what);
    };
    (@one max_idle_time $what:literal) => {
        crate::pool::settings::setters!(@idle max_idle_time $what);
    };
    (@idle $name:ident $what:literal) => {
        #[doc = $what]
        ///
        /// Zero is a [`ConfigError::Zero`](crate::ConfigError::Zero).
        pub fn $name(mut self, timeout: ::std::time::Duration) -> Self {
            self.settings.idle_timeout = timeout;
            self
        }
    };
    (@one reap_interval $what:literal) => {
        crate::pool::settings::setters!(@reap reap_interval $what);
    };
    (@one reap_every $what:literal) => {
        crate::pool::settings::setters!(@reap reap_every $what);
    };
    (@reap $name:ident $what:literal) => {
        #[doc = $what]
        ///
        /// `None` turns the background reaper off: call `reap(now)` yourself. The default
        /// reaper runs only when the pool is built inside a tokio runtime; asking for an
        /// interval outside one is a [`ConfigError::Missing`](crate::ConfigError::Missing),
        /// and a zero interval a [`ConfigError::Zero`](crate::ConfigError::Zero).
        pub fn $name(mut self, interval: ::std::option::Option<::std::time::Duration>) -> Self {
            self.settings.set_reap_interval(interval);
            self
        }
    };
    (@one clock $what:literal) => {
        #[doc = $what]
        ///
        /// Tests pass a [`Clock::mock`](crate::Clock::mock) and call `reap(now)` themselves
        /// with the background reaper off: a background reaper ticks on tokio's timer but
        /// reads this clock, so with a mock it reaps only as far as the mock has been
        /// advanced.
        pub fn clock(mut self, clock: crate::Clock) -> Self {
            self.settings.clock = ::std::option::Option::Some(clock.quanta().clone());
            self
        }
    };
    (@one name $what:literal) => {
        #[doc = $what]
        ///
        /// With the `metrics` feature, each wait of a caller (served, timed out or given up) is
        /// recorded in seconds in the pool's wait histogram, labelled `pool = name`; without
        /// this setting the label is `"default"`. Give the pool the name its exporter uses
        /// (`slotpool::metrics::spawn_exporter`'s), so that the histogram and the pool's
        /// counters share their label. A caller that does not wait records nothing. Default:
        /// `"default"`.
        pub fn name(
            mut self,
            name: impl ::std::convert::Into<::std::borrow::Cow<'static, str>>,
        ) -> Self {
            self.settings.name = name.into();
            self
        }
    };
    (@one breaker $what:literal) => {
        #[doc = $what]
        ///
        /// A threshold of zero is a [`ConfigError::Zero`](crate::ConfigError::Zero).
        pub fn breaker(mut self, consecutive_failures: u32, backoff: ::std::time::Duration) -> Self {
            self.settings.breaker = ::std::option::Option::Some((consecutive_failures, backoff));
            self
        }
    };
}

pub(crate) use setters;
