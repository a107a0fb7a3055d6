//! [`PoolBuilder`]: the settings of a managed [`Pool`], checked and turned into a running pool
//! by [`PoolBuilder::build`].

use std::fmt;
use std::time::Duration;

use tokio::runtime::Handle;

use super::manager::{Hook, Hooks, Manager};
use super::stats::Counters;
use super::time::RecentClock;
use super::{BuildError, Config, Pool, PoolHandle, Shared};
use crate::error::ConfigError;
use crate::pool::hold::HoldWatch;
use crate::pool::reap::nanos;
use crate::pool::settings::{self, Names, Settings};
use crate::protocol::breaker::Breaker;
use crate::protocol::exclusive::{ExclusiveSlots, Reuse, MAX_SIZE};
use crate::protocol::slots::Capacity;
use std::sync::OnceLock;

use crate::sync::{Arc, AtomicUsize, Weak};

/// When an idle object is recycled ([`Manager::recycle`] and the recycle hooks) before it is
/// handed out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recycle {
    /// Every time (deadpool's behaviour). The default.
    Always,
    /// Only when it has been idle longer than this (a liveness check for connections that sat
    /// unused; hot objects are handed out without one). Idle time counts from the object's
    /// last return as the pool stamped it (at most one reap interval early, so it is never
    /// under-counted and a check is never skipped that was due).
    IdleLongerThan(Duration),
    /// Never: objects go out as they came back.
    Never,
}

/// The deadlines of a `get`'s three steps (deadpool's `Timeouts`, field for field): waiting
/// for an object or for room, one [`Manager::create`], one [`Manager::recycle`]. `None` is no
/// deadline for that step. The pool's own are set with [`PoolBuilder::timeouts`] (or one at a
/// time) and read with [`Pool::timeouts`]; [`Pool::get_timeouts`] takes others for one call.
///
/// ```
/// use std::time::Duration;
/// use slotpool::managed::Timeouts;
///
/// let t = Timeouts {
///     create: Some(Duration::from_secs(2)),
///     ..Timeouts::wait_millis(250)
/// };
/// assert_eq!(t.wait, Some(Duration::from_millis(250)));
/// assert_eq!(t.recycle, None);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
pub struct Timeouts {
    /// How long a `get` waits for an object or for room to create one; past it the `get`
    /// fails with [`PoolError::Timeout`](super::PoolError::Timeout) in step `wait`.
    pub wait: Option<Duration>,
    /// How long one [`Manager::create`] may take; past it the creation is dropped and the
    /// `get` fails with a timeout in step `create` (its room is given back).
    pub create: Option<Duration>,
    /// How long one [`Manager::recycle`] may take; past it the object is dropped and the
    /// `get` goes on with another. The timer starts only if the recycle does not finish on
    /// its first poll.
    pub recycle: Option<Duration>,
}

impl Timeouts {
    /// No deadline for any step.
    pub const fn new() -> Self {
        Timeouts {
            wait: None,
            create: None,
            recycle: None,
        }
    }

    /// A wait deadline of `millis` milliseconds, and none for the other steps.
    pub const fn wait_millis(millis: u64) -> Self {
        Timeouts {
            wait: Some(Duration::from_millis(millis)),
            create: None,
            recycle: None,
        }
    }
}

/// Which idle object a `get` takes: [`PoolBuilder::queue_mode`].
///
/// The default, [`QueueMode::Lowest`], takes the idle object in the lowest slot: the objects
/// at the bottom of the table are used again and again while the ones above them go idle, so
/// `idle_timeout` can close what a quieter load no longer needs, and a connection that is
/// used often stays warm (its caches, its server backend's). [`QueueMode::Fifo`] uses every
/// idle object in turn (round robin: the search starts one past the slot of the last
/// checkout and wraps around), as deadpool's default does: the load spreads over every
/// connection, which keeps each one's server-side state (and a load balancer's view of it)
/// even, and on some machines wins at one task; idle objects are then seldom idle long
/// enough to be reaped. `Fifo` costs one more load and store of a shared cursor per
/// checkout.
///
/// ```
/// # use std::convert::Infallible;
/// use slotpool::managed::{Manager, Pool, QueueMode};
/// # struct Counter(std::sync::atomic::AtomicU32);
/// # impl Manager for Counter {
/// #     type Type = u32;
/// #     type Error = Infallible;
/// #     async fn create(&self) -> Result<u32, Infallible> {
/// #         Ok(self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
/// #     }
/// # }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let pool = Pool::builder(Counter(Default::default()))
///     .max_size(3)
///     .queue_mode(QueueMode::Fifo)
///     .build()
///     .expect("valid configuration");
/// // Three objects, created by three callers at once, then used in turn by one.
/// let all = [pool.get().await.unwrap(), pool.get().await.unwrap(), pool.get().await.unwrap()];
/// drop(all);
/// let mut seen = Vec::new();
/// for _ in 0..6 {
///     seen.push(*pool.get().await.unwrap());
/// }
/// assert_eq!(seen, [0, 1, 2, 0, 1, 2]);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
pub enum QueueMode {
    /// The idle object in the lowest slot (the default). At one caller this is deadpool's
    /// `Lifo`: the object just returned is the lowest idle one, so it goes out again.
    #[default]
    #[cfg_attr(feature = "serde", serde(alias = "Lifo"))]
    Lowest,
    /// Every idle object in turn (round robin), deadpool's `Fifo`: at one caller, the object
    /// idle the longest goes out first.
    Fifo,
}

#[allow(non_upper_case_globals)]
impl QueueMode {
    /// deadpool's name for the order closest to [`QueueMode::Lowest`] (the same at one
    /// caller), so that ported code compiles.
    pub const Lifo: QueueMode = QueueMode::Lowest;
}

/// The create back-off: [`PoolBuilder::create_backoff`]. After `after_failures` creations in
/// a row have failed (the manager's error, a create timeout or a panic in `create`: the
/// server is down or refusing), new creations pause; then one `get` tries (the probe) while
/// the others keep waiting, and its success ends the pause (a failure starts another). The
/// first pause lasts `first`, each one after a failed probe twice the one before, up to
/// `backoff`; a success starts over. Each lasts between half of its length and all of it,
/// spread by the time it started, so that pools that met the same outage do not all come
/// back at once. So a server that restarts in a moment is found again at once, and one that
/// stays down meets a handful of connection attempts however many callers ask, instead of
/// one per caller.
///
/// A `get` that needs a new object while creations are paused gives its room back (to a
/// waiter, or for an object that comes back) and sleeps until the pause ends, then tries
/// again, all within its wait deadline; if the pause outlasts that deadline, or if
/// `fail_fast` is set, or for `try_get`, it fails at once with
/// [`PoolError::Unavailable`](super::PoolError::Unavailable)`{ retry_after }` instead of
/// waiting its deadline out. Idle objects are handed out as ever: only creations pause.
/// [`Stats::paused`](super::Stats::paused) counts the creations held back.
///
/// On by default: 3 failures in a row, pauses from 10 ms doubling up to 80 ms, callers
/// wait: a pool tries a server that came back within one pause (at most 80 ms) of its
/// return, and makes one connection attempt per pause while it is down, however many
/// callers ask (71 attempts in the fault bench's 3 s outage, in one run).
/// [`CreateBackoff::off`] turns it off (every `get` that finds room creates, as deadpool and
/// bb8 do).
///
/// ```
/// use std::time::Duration;
/// use slotpool::managed::CreateBackoff;
///
/// let backoff = CreateBackoff {
///     backoff: Duration::from_secs(2),
///     fail_fast: true,
///     ..CreateBackoff::default()
/// };
/// assert_eq!(backoff.after_failures, 3);
/// assert_eq!(backoff.first, Duration::from_millis(10));
/// assert_eq!(CreateBackoff::off().after_failures, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateBackoff {
    /// Creations failed in a row that start a pause; 0 turns the back-off off.
    pub after_failures: u32,
    /// How long the first pause after a success lasts (each later one twice the one before).
    pub first: Duration,
    /// The longest a pause lasts. (Each pause lasts between half of its length and all of
    /// it.)
    pub backoff: Duration,
    /// Whether a `get` that needs a creation during a pause fails at once with
    /// `PoolError::Unavailable` rather than waiting for the pause to end.
    pub fail_fast: bool,
}

impl CreateBackoff {
    /// No back-off: every `get` that finds room creates.
    pub const fn off() -> Self {
        CreateBackoff {
            after_failures: 0,
            first: Duration::ZERO,
            backoff: Duration::ZERO,
            fail_fast: false,
        }
    }

    /// Whether it is on.
    pub const fn is_on(&self) -> bool {
        self.after_failures > 0
    }
}

impl Default for CreateBackoff {
    /// 3 failures in a row, pauses from 10 ms doubling up to 80 ms, callers wait.
    fn default() -> Self {
        CreateBackoff {
            after_failures: 3,
            first: Duration::from_millis(10),
            backoff: Duration::from_millis(80),
            fail_fast: false,
        }
    }
}

/// Builder for a managed [`Pool`]; see [`Pool::builder`].
pub struct PoolBuilder<M: Manager> {
    manager: M,
    max_size: usize,
    min_idle: usize,
    max_lifetime: Option<Duration>,
    timeouts: Timeouts,
    /// [`PoolBuilder::connection_timeout`].
    get_timeout: Option<Duration>,
    /// [`PoolBuilder::held_too_long`].
    held_too_long: Option<Duration>,
    /// The setters that set each of `timeouts` last (for errors).
    timeout_names: [&'static str; 3],
    recycle: Recycle,
    queue_mode: QueueMode,
    create_backoff: CreateBackoff,
    hooks: Hooks<M>,
    settings: Settings,
}

impl<M: Manager> PoolBuilder<M> {
    /// The defaults; see [`Pool::builder`].
    pub(super) fn new(manager: M) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        PoolBuilder {
            manager,
            max_size: cores * 4,
            min_idle: 0,
            max_lifetime: None,
            timeouts: Timeouts {
                wait: None,
                create: Some(Duration::from_secs(30)),
                recycle: Some(Duration::from_secs(30)),
            },
            get_timeout: None,
            held_too_long: None,
            timeout_names: ["wait_timeout", "create_timeout", "recycle_timeout"],
            recycle: Recycle::Always,
            queue_mode: QueueMode::Lowest,
            create_backoff: CreateBackoff::default(),
            hooks: Hooks::default(),
            settings: Settings::new(Duration::from_secs(600), Duration::from_secs(30)),
        }
    }

    /// The most objects that exist at once (idle, in use, being created, or being closed:
    /// an object the pool drops counts until its `detach` and destructor are done); `get` waits
    /// when all exist and none is idle. Change it at run time with [`Pool::resize`].
    /// Default: four per CPU core (as deadpool).
    pub fn max_size(mut self, max_size: usize) -> Self {
        self.max_size = max_size;
        self
    }

    /// Pauses creations after failures in a row, so that an outage meets one connection
    /// attempt per pause rather than one per caller; see [`CreateBackoff`] (on by default).
    pub fn create_backoff(mut self, create_backoff: CreateBackoff) -> Self {
        self.create_backoff = create_backoff;
        self
    }

    /// Which idle object a `get` takes: the lowest (the default) or each in turn; see
    /// [`QueueMode`]. deadpool's `PoolConfig::queue_mode`.
    pub fn queue_mode(mut self, queue_mode: QueueMode) -> Self {
        self.queue_mode = queue_mode;
        self
    }

    /// Keeps at least this many objects idle, creating them in the background (at build,
    /// whenever objects are dropped, and after a checkout that may leave fewer idle: at once,
    /// not at the next reap interval), within `max_size`; the reaper does not close idle
    /// objects below it (objects past `max_lifetime` are still replaced). The background
    /// task starts as [`PoolBuilder::build`] says; [`Pool::prewarm`] fills it on demand.
    /// Default: 0.
    pub fn min_idle(mut self, min_idle: usize) -> Self {
        self.min_idle = min_idle;
        self
    }

    /// Drops an object once it is this old: at checkout (it is replaced, not handed out),
    /// at return, and in the background reaper. Default: none.
    pub fn max_lifetime(mut self, max_lifetime: Option<Duration>) -> Self {
        self.max_lifetime = max_lifetime;
        self
    }

    /// How long a `get` waits for an object or for room to create one before it fails with
    /// [`PoolError::Timeout`](super::PoolError::Timeout) in step `wait`. Default: none (wait
    /// until one comes back; bound a single call with [`Pool::get_timeout`]).
    pub fn wait_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeouts.wait = timeout;
        self.timeout_names[0] = "wait_timeout";
        self
    }

    /// Reports a checkout held longer than `threshold` (HikariCP's leak detection): once,
    /// while it is still held, as a `tracing` warning with the call site of the `get` that
    /// took it and its age, counted in [`Stats::held_too_long`](super::Stats::held_too_long);
    /// and again, with its whole length, when it comes back. The background reaper looks
    /// every quarter of `threshold` (or its reap interval, if shorter), so a report comes
    /// between one and one and a quarter thresholds after the checkout; [`Pool::reap`] looks
    /// too (with `reap_interval(None)`, only it does). On, each checkout and return reads the
    /// clock, and hold times add up in [`Stats::hold_time`](super::Stats::hold_time); off (the
    /// default), neither reads it.
    ///
    /// ```
    /// # use std::convert::Infallible;
    /// # use std::time::Duration;
    /// # use slotpool::managed::{Manager, Pool};
    /// # struct Numbers;
    /// # impl Manager for Numbers {
    /// #     type Type = u64;
    /// #     type Error = Infallible;
    /// #     async fn create(&self) -> Result<u64, Infallible> { Ok(0) }
    /// # }
    /// let pool = Pool::builder(Numbers)
    ///     .held_too_long(Some(Duration::from_secs(30)))
    ///     .build()?;
    /// # Ok::<(), slotpool::ConfigError>(())
    /// ```
    pub fn held_too_long(mut self, threshold: Option<Duration>) -> Self {
        self.held_too_long = threshold;
        self
    }

    /// A deadline over the whole of every [`Pool::get`] (bb8's `connection_timeout`): waiting,
    /// creating and recycling together, as [`Pool::get_timeout`] bounds one call (the step
    /// running when it passes is in the error, and a creation it cuts short goes on off the
    /// caller). The per-step deadlines still bound each step within it; `wait_timeout` is
    /// then not used by `get` (the whole-get deadline is the wait's). `try_get`,
    /// `get_timeout` and `get_timeouts` keep their own. Default: none.
    /// Takes a `Duration` (as bb8's does) or an `Option` (`None`: no deadline).
    pub fn connection_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.get_timeout = timeout.into();
        self
    }

    /// How long one [`Manager::create`] may take; past it the creation is dropped and the
    /// `get` fails with a timeout in step `create` (its room is given back). Default: 30 s.
    pub fn create_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeouts.create = timeout;
        self.timeout_names[1] = "create_timeout";
        self
    }

    /// How long one [`Manager::recycle`] may take; past it the object is dropped and the
    /// `get` goes on with another. The timer starts only if the recycle does not finish on
    /// its first poll. Default: 30 s.
    pub fn recycle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeouts.recycle = timeout;
        self.timeout_names[2] = "recycle_timeout";
        self
    }

    /// Where the pool tells the failures of its own work, which no caller sees (bb8's
    /// `error_sink`): a creation for `min_idle` that failed, a creation finished after its
    /// caller left that failed. Called with the error on the thread that failed; a panic in
    /// it is counted and logged. Default: none (the failures are logged with `tracing` and
    /// counted in `create_failures` either way).
    ///
    /// ```
    /// # use std::convert::Infallible;
    /// # use slotpool::managed::{Manager, Pool, RecycleResult, Meta};
    /// # struct Conns;
    /// # impl Manager for Conns {
    /// #     type Type = u32;
    /// #     type Error = Infallible;
    /// #     async fn create(&self) -> Result<u32, Infallible> { Ok(1) }
    /// #     async fn recycle(&self, _: &mut u32, _: &Meta) -> RecycleResult<Infallible> { Ok(()) }
    /// # }
    /// let pool = Pool::builder(Conns)
    ///     .error_sink(|error| eprintln!("pool: {error}"))
    ///     .build()?;
    /// # Ok::<(), slotpool::ConfigError>(())
    /// ```
    pub fn error_sink(
        mut self,
        sink: impl Fn(&super::PoolError<M::Error>) + Send + Sync + 'static,
    ) -> Self {
        self.hooks.error_sink = Some(Box::new(sink));
        self
    }

    /// All three deadlines at once (deadpool's `timeouts`), replacing the defaults: a
    /// `None` field is no deadline for that step. A zero field is refused by `build`, naming
    /// it (`timeouts.wait`, `timeouts.create`, `timeouts.recycle`).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self.timeout_names = ["timeouts.wait", "timeouts.create", "timeouts.recycle"];
        self
    }

    /// When idle objects are recycled before they go out again. Default:
    /// [`Recycle::Always`].
    pub fn recycle(mut self, policy: Recycle) -> Self {
        self.recycle = policy;
        self
    }

    /// Adds a hook run on every new object after [`Manager::create`] (in the order added);
    /// an `Err` drops the object and fails the `get` with
    /// [`PoolError::PostCreateHook`](super::PoolError::PostCreateHook).
    pub fn post_create(mut self, hook: Hook<M>) -> Self {
        self.hooks.post_create.push(hook);
        self
    }

    /// Adds a hook run before [`Manager::recycle`]; an `Err` rejects the object as a failed
    /// recycle does (it is dropped and the `get` goes on with another).
    pub fn pre_recycle(mut self, hook: Hook<M>) -> Self {
        self.hooks.pre_recycle.push(hook);
        self
    }

    /// Adds a hook run after a successful [`Manager::recycle`]; an `Err` rejects the object
    /// as a failed recycle does.
    pub fn post_recycle(mut self, hook: Hook<M>) -> Self {
        self.hooks.post_recycle.push(hook);
        self
    }

    settings::setters! {
        idle_timeout: "How long an object may sit idle before the background reaper drops it \
                       (keeping `min_idle`). Default: 10 min.";
        reap_interval: "How often the background reaper runs [`Pool::reap`] (idle timeout and \
                        lifetime) and tops `min_idle` up. Default: every 30 s.";
        clock: "The clock object ages, idle times and waits \
                ([`Stats::wait_time`](super::Stats::wait_time)) are measured with. Default: \
                the machine's clock.";
        name: "The pool's name: the `pool` label of its wait histogram, \
               `slotpool_managed_wait_seconds` (one sample per `get` that waited, the waits \
               [`Stats::wait_time`](super::Stats::wait_time) adds up).";
    }

    /// Builds the pool. Needs no runtime: the background task (the reaper every
    /// `reap_interval`, and `min_idle`) starts now on the tokio runtime this is called in, or,
    /// built outside one (a `static`, before the runtime), on the runtime of the first `get`
    /// that creates an object, or of the first [`Pool::prewarm`]. Until then nothing is
    /// reaped and nothing exists to reap.
    ///
    /// # Errors
    /// A [`ConfigError`] that names the setter: a zero `max_size` or one above
    /// `MAX_SIZE`, `min_idle` above `max_size`, a zero `max_lifetime`,
    /// `connection_timeout`, `wait_timeout`,
    /// `create_timeout`, `recycle_timeout` (or field of `timeouts`), `idle_timeout` or
    /// `reap_interval`, or a back-off that is on with a zero first pause
    /// (`create_backoff.first`) or one longer than its longest (`create_backoff.backoff`).
    pub fn build(self) -> Result<Pool<M>, ConfigError> {
        self.build_starting(true)
    }

    /// [`PoolBuilder::build`], starting the background task now (inside a runtime) only if
    /// `start`: [`PoolBuilder::build_eager`] starts it once its first objects exist, so that
    /// the task's `min_idle` top-up cannot take their room while they are being created.
    fn build_starting(self, start: bool) -> Result<Pool<M>, ConfigError> {
        if self.max_size == 0 {
            return Err(ConfigError::Zero("max_size"));
        }
        if self.max_size > MAX_SIZE {
            return Err(ConfigError::TooLarge {
                name: "max_size",
                value: self.max_size as u64,
                max: MAX_SIZE as u64,
            });
        }
        if self.min_idle > self.max_size {
            return Err(ConfigError::Inverted {
                low: "min_idle",
                low_value: self.min_idle as u64,
                high: "max_size",
                high_value: self.max_size as u64,
            });
        }
        let backoff = self.create_backoff;
        if backoff.is_on() {
            if backoff.first.is_zero() {
                return Err(ConfigError::Zero("create_backoff.first"));
            }
            if backoff.first > backoff.backoff {
                return Err(ConfigError::Inverted {
                    low: "create_backoff.first",
                    low_value: nanos(backoff.first),
                    high: "create_backoff.backoff",
                    high_value: nanos(backoff.backoff),
                });
            }
        }
        let [wait, create, recycle] = self.timeout_names;
        for (name, value) in [
            ("max_lifetime", self.max_lifetime),
            ("connection_timeout", self.get_timeout),
            ("held_too_long", self.held_too_long),
            (wait, self.timeouts.wait),
            (create, self.timeouts.create),
            (recycle, self.timeouts.recycle),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                return Err(ConfigError::Zero(name));
            }
        }
        self.settings.check(Names::PLAIN)?;
        let runtime = Handle::try_current().ok();
        // Outside a runtime too: the task starts on first use inside one.
        let hold = self.held_too_long.map(|threshold| {
            HoldWatch::new(
                threshold,
                "managed",
                "slotpool_managed_hold_seconds",
                self.settings.name.clone(),
            )
        });
        // A watch of holds needs passes a quarter of its threshold apart.
        let reap_interval = self.settings.reap_every().map(|every| {
            hold.as_ref()
                .map_or(every, |watch| every.min(watch.scan_every()))
        });
        let reuse = match self.queue_mode {
            QueueMode::Lowest => Reuse::Lowest,
            QueueMode::Fifo => Reuse::Rotate,
        };
        let slots = ExclusiveSlots::with_reuse(Capacity::Bounded(self.max_size), reuse)?;
        let time = RecentClock::new(self.settings.clock_or(quanta::Clock::new), reap_interval);
        let config = Config {
            min_idle: self.min_idle,
            max_lifetime: self.max_lifetime.map(nanos),
            idle_timeout: nanos(self.settings.idle_timeout),
            timeouts: self.timeouts,
            get_timeout: self.get_timeout,
            recycle: self.recycle,
            reads_clock: self.max_lifetime.is_some()
                || matches!(self.recycle, Recycle::IdleLongerThan(_)),
            return_checks: self.max_lifetime.is_some() || hold.is_some() || time.staleness == 0,
            checkout_work: self.min_idle > 0 || hold.is_some(),
            recycle_hooks: self.hooks.any_recycle(),
            reap_interval,
            maintained: reap_interval.is_some() || self.min_idle > 0,
            queue_mode: self.queue_mode,
            backoff: self.create_backoff.is_on(),
            backoff_fails_fast: self.create_backoff.fail_fast,
        };
        let max_size = self.max_size;
        let handle = Arc::new_cyclic(|handle| {
            let shared = Arc::new(Shared {
                slots,
                manager: self.manager,
                hooks: self.hooks,
                config,
                time,
                counters: Counters::new(self.settings.name.clone()),
                runtime: runtime.clone(),
                maintain: Arc::new(tokio::sync::Notify::new()),
                handle: Weak::clone(handle),
                max_size: AtomicUsize::new(max_size),
                maintainer: OnceLock::new(),
                backoff: Breaker::new(
                    self.create_backoff.after_failures,
                    nanos(self.create_backoff.backoff),
                )
                .growing(nanos(self.create_backoff.first))
                .jittered(),
                hold,
            });
            if let Some(runtime) = runtime.as_ref().filter(|_| start) {
                shared.start_maintainer(runtime);
            }
            PoolHandle { shared }
        });
        Ok(Pool { handle })
    }
}

impl<M: Manager> PoolBuilder<M> {
    /// Builds the pool and creates its first objects before answering, as bb8's async
    /// `build` does: `min_idle` of them, and at least one, so that a server that cannot be
    /// reached fails the build rather than the first `get`. Each creation runs under the
    /// pool's `create` timeout; the first failure closes the pool (dropping what was
    /// created) and is returned. [`PoolBuilder::build`] creates nothing and never waits.
    ///
    /// Unlike bb8, `min_idle` 0 still creates one object (bb8 then checks nothing); it stays
    /// idle in the pool.
    ///
    /// ```
    /// # use std::convert::Infallible;
    /// use slotpool::managed::{Manager, Pool};
    /// # struct Counter(std::sync::atomic::AtomicU32);
    /// # impl Manager for Counter {
    /// #     type Type = u32;
    /// #     type Error = Infallible;
    /// #     async fn create(&self) -> Result<u32, Infallible> {
    /// #         Ok(self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    /// #     }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = Pool::builder(Counter(Default::default()))
    ///     .max_size(8)
    ///     .min_idle(2)
    ///     .build_eager()
    ///     .await?;
    /// assert_eq!(pool.status().available, 2);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`BuildError::Config`] for a setting [`PoolBuilder::build`] refuses;
    /// [`BuildError::Create`] with the first creation's error ([`BuildError::manager_error`]
    /// is the manager's own, as bb8 returns it).
    pub async fn build_eager(self) -> Result<Pool<M>, BuildError<M::Error>> {
        // The background task starts after the first objects (in `fill_or_close`): started
        // now, its `min_idle` top-up could take their room while they are being created, and
        // this build would answer with them not all idle, or `Ok` for a server it never
        // reached.
        let pool = self.build_starting(false)?;
        let wanted = pool.shared().config.min_idle.max(1);
        pool.fill_or_close(wanted)
            .await
            .map_err(BuildError::Create)?;
        Ok(pool)
    }
}

impl<M: Manager> fmt::Debug for PoolBuilder<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuilder")
            .field("max_size", &self.max_size)
            .field("min_idle", &self.min_idle)
            .field("max_lifetime", &self.max_lifetime)
            .field("timeouts", &self.timeouts)
            .field("connection_timeout", &self.get_timeout)
            .field("held_too_long", &self.held_too_long)
            .field("recycle", &self.recycle)
            .field("queue_mode", &self.queue_mode)
            .field("create_backoff", &self.create_backoff)
            .field("hooks", &self.hooks)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
