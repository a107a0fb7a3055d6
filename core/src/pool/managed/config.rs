//! [`PoolConfig`]: a managed pool's size, deadlines and queue order as one plain value, the
//! shape of deadpool's `PoolConfig`, for settings that come from a file or the environment.
//!
//! This file owns the value and [`PoolBuilder::config`], which hands it to the builder's own
//! setters; it checks nothing itself (the builder's `build` does, naming each field).

use super::builder::{PoolBuilder, QueueMode, Timeouts};
use super::manager::Manager;

/// A managed pool's size, deadlines and queue order (deadpool's `PoolConfig`, field for
/// field), applied with [`PoolBuilder::config`].
///
/// # Defaults
///
/// [`PoolConfig::default`] is deadpool's, not [`PoolBuilder`]'s, so that a ported
/// configuration behaves as it did: `max_size` twice the CPU count, no deadlines, and
/// [`QueueMode::Fifo`]. A pool built with [`Pool::builder`](super::Pool::builder) alone has
/// a 30 s create and recycle deadline and [`QueueMode::Lowest`].
///
/// # Serde (feature `serde`)
///
/// The fields and their encoding are deadpool's, so a deadpool file loads unchanged: each
/// deadline is `{ secs, nanos }` (serde's `Duration`), `queue_mode` is `"Fifo"` or `"Lifo"`
/// (read as [`QueueMode::Lowest`], its nearest order, and written back as `"Lowest"`). A
/// field left out takes its default.
///
/// ```
/// use std::time::Duration;
/// use slotpool::managed::{PoolConfig, QueueMode, Timeouts};
///
/// let config = PoolConfig {
///     timeouts: Timeouts::wait_millis(500),
///     ..PoolConfig::new(16)
/// };
/// assert_eq!(config.max_size, 16);
/// assert_eq!(config.timeouts.wait, Some(Duration::from_millis(500)));
/// assert_eq!(config.queue_mode, QueueMode::Fifo);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct PoolConfig {
    /// The most objects that exist at once ([`PoolBuilder::max_size`]). `build` refuses 0.
    pub max_size: usize,
    /// The deadlines of a `get`'s steps ([`PoolBuilder::timeouts`]); `None` fields are no
    /// deadline, and `build` refuses a zero one, naming it (`timeouts.wait`, ...).
    pub timeouts: Timeouts,
    /// Which idle object a `get` takes ([`PoolBuilder::queue_mode`]).
    pub queue_mode: QueueMode,
}

impl PoolConfig {
    /// `max_size` as given, no deadlines, [`QueueMode::Fifo`] (deadpool's `PoolConfig::new`).
    pub const fn new(max_size: usize) -> Self {
        PoolConfig {
            max_size,
            timeouts: Timeouts::new(),
            queue_mode: QueueMode::Fifo,
        }
    }
}

impl Default for PoolConfig {
    /// Twice the CPU count (logical cores, as deadpool counts), no deadlines,
    /// [`QueueMode::Fifo`].
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        PoolConfig::new(cores * 2)
    }
}

impl<M: Manager> PoolBuilder<M> {
    /// Sets `max_size`, all three deadlines and the queue order from `config` (deadpool's
    /// `PoolBuilder::config`); the other settings keep what they had. `build` names a bad
    /// field as the config does: `max_size`, `timeouts.wait`, `timeouts.create`,
    /// `timeouts.recycle`.
    ///
    /// ```
    /// # use std::convert::Infallible;
    /// use slotpool::managed::{Manager, Pool, PoolConfig};
    /// # struct Conns;
    /// # impl Manager for Conns {
    /// #     type Type = u32;
    /// #     type Error = Infallible;
    /// #     async fn create(&self) -> Result<u32, Infallible> { Ok(1) }
    /// # }
    ///
    /// let pool = Pool::builder(Conns).config(PoolConfig::new(8)).build()?;
    /// assert_eq!(pool.status().max_size, 8);
    ///
    /// let refused = Pool::builder(Conns).config(PoolConfig::new(0)).build();
    /// assert_eq!(refused.err(), Some(slotpool::ConfigError::Zero("max_size")));
    /// # Ok::<(), slotpool::ConfigError>(())
    /// ```
    pub fn config(self, config: PoolConfig) -> Self {
        self.max_size(config.max_size)
            .timeouts(config.timeouts)
            .queue_mode(config.queue_mode)
    }
}

#[cfg(test)]
mod tests {
    use super::{PoolConfig, QueueMode, Timeouts};

    #[test]
    fn the_default_is_deadpools() {
        let config = PoolConfig::default();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(config.max_size, cores * 2);
        assert_eq!(config.timeouts, Timeouts::new());
        assert_eq!(config.queue_mode, QueueMode::Fifo);
    }
}
