//! What the user supplies: the [`Manager`] that creates and recycles objects, the hooks that
//! may reject one, and the metadata ([`Meta`]) both are shown.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Creates and recycles the objects of a [`Pool`](super::Pool) (database connections,
/// clients, sessions).
///
/// Everything here is user code as far as the pool is concerned: a panic in any of these
/// methods (or while a future they return is polled, or dropped) is caught where the pool
/// calls it, logged once, and becomes a typed error for the caller it touched; the object
/// involved is dropped and its room given back. No lock is held while any of it runs, and
/// other callers are not blocked by it.
///
/// ```
/// use std::convert::Infallible;
/// use slotpool::managed::{Manager, Meta, RecycleError};
///
/// /// Connections are numbers here; a database client in real use.
/// struct Numbers;
///
/// impl Manager for Numbers {
///     type Type = u64;
///     type Error = Infallible;
///
///     async fn create(&self) -> Result<u64, Infallible> {
///         Ok(0)
///     }
///
///     // Optional: the default accepts every object as it is.
///     async fn recycle(&self, n: &mut u64, _: &Meta) -> Result<(), RecycleError<Infallible>> {
///         if *n > 1_000 {
///             return Err(RecycleError::message("worn out"));
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Manager: Send + Sync + 'static {
    /// The pooled object.
    type Type: Send + 'static;
    /// Why an object could not be created (or recycled).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Creates a new object. Runs when a caller finds nothing idle and the pool has room.
    ///
    /// If that caller stops waiting (its `get` is cancelled, or its `get_timeout` expires)
    /// while `create` runs, the pool finishes the creation on its own task and keeps the
    /// object idle for the next caller: a connection that was nearly made is not thrown away.
    fn create(&self) -> impl Future<Output = Result<Self::Type, Self::Error>> + Send;

    /// Checks an idle object before it is handed out again (a cheap liveness check, resetting
    /// session state), as the pool's [`Recycle`](super::Recycle) policy says. `Err` rejects
    /// the object: it is dropped, its room given back, and the caller gets another object
    /// (or a new one). The default accepts every object unchanged.
    ///
    /// A caller cancelled while `recycle` runs drops the recycle future with it, and the
    /// object, whose state is then unknown, is dropped too (its room is given back).
    fn recycle(
        &self,
        object: &mut Self::Type,
        meta: &Meta,
    ) -> impl Future<Output = RecycleResult<Self::Error>> + Send {
        let _ = (object, meta);
        std::future::ready(Ok(()))
    }

    /// A recycle that needs no await (a flag read, a liveness bit, a counter): `Some(result)`
    /// decides as [`Manager::recycle`] would, and `recycle` is not called; `None` (the
    /// default) runs `recycle`. Called first wherever `recycle` would be (after the
    /// `pre_recycle` hooks, before the `post_recycle` ones).
    ///
    /// The pool's fast path: a `get` that finds an idle object, with no hooks and a
    /// `recycle_now` that decides, takes it, checks it and hands it out with no state
    /// machine of its own (a synchronous check is what asyncband's `is_recyclable` is; an
    /// async `recycle` that is ready at once still costs its future). The pool's own
    /// [`postgres`](super::postgres) manager decides here for its `Fast` recycling.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use slotpool::managed::{Manager, Meta, RecycleError, RecycleResult};
    ///
    /// struct Numbers;
    ///
    /// impl Manager for Numbers {
    ///     type Type = u64;
    ///     type Error = Infallible;
    ///
    ///     async fn create(&self) -> Result<u64, Infallible> {
    ///         Ok(0)
    ///     }
    ///
    ///     fn recycle_now(&self, n: &mut u64, _: &Meta) -> Option<RecycleResult<Infallible>> {
    ///         Some(if *n > 1_000 { Err(RecycleError::message("worn out")) } else { Ok(()) })
    ///     }
    /// }
    /// ```
    fn recycle_now(
        &self,
        object: &mut Self::Type,
        meta: &Meta,
    ) -> Option<RecycleResult<Self::Error>> {
        let _ = (object, meta);
        None
    }

    /// Asked of an object as it comes back from its holder (bb8's `has_broken`): `true` drops
    /// it then (counted in [`Stats::broken`](super::Stats::broken)) and gives its room back,
    /// instead of keeping a dead connection idle until its next checkout. A panic counts as
    /// `true`. It runs inside the guard's drop, so it must not block: read a flag the
    /// connection keeps (tokio-postgres's `Client::is_closed`, say). The default says no,
    /// and costs nothing.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use slotpool::managed::Manager;
    ///
    /// struct Conn { closed: bool }
    /// struct Connector;
    ///
    /// impl Manager for Connector {
    ///     type Type = Conn;
    ///     type Error = Infallible;
    ///
    ///     async fn create(&self) -> Result<Conn, Infallible> {
    ///         Ok(Conn { closed: false })
    ///     }
    ///
    ///     fn has_broken(&self, conn: &mut Conn) -> bool {
    ///         conn.closed
    ///     }
    /// }
    /// ```
    fn has_broken(&self, object: &mut Self::Type) -> bool {
        let _ = object;
        false
    }

    /// Called when an object leaves the pool for good ([`Object::take`](super::Object::take),
    /// or dropped: rejected, expired, reaped, over a shrunk size, the pool closed). For
    /// managers that keep track of their objects; the default does nothing.
    fn detach(&self, object: &mut Self::Type) {
        let _ = object;
    }
}

/// What [`Manager::recycle`] returns (and [`Manager::recycle_now`] when it decides).
pub type RecycleResult<E> = Result<(), RecycleError<E>>;

/// Why [`Manager::recycle`] rejected an object.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecycleError<E: std::error::Error + 'static> {
    /// The manager's reason, in words.
    #[error("rejected: {0}")]
    Message(Cow<'static, str>),
    /// The backend's error (the connection is broken, say).
    #[error("recycling failed: {0}")]
    Backend(#[source] E),
}

impl<E: std::error::Error + 'static> RecycleError<E> {
    /// A rejection with a reason in words.
    pub fn message(message: impl Into<Cow<'static, str>>) -> Self {
        RecycleError::Message(message.into())
    }
}

impl<E: std::error::Error + 'static> From<E> for RecycleError<E> {
    fn from(error: E) -> Self {
        RecycleError::Backend(error)
    }
}

/// Why a hook rejected an object.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HookError<E: std::error::Error + 'static> {
    /// The hook's reason, in words.
    #[error("{0}")]
    Message(Cow<'static, str>),
    /// The backend's error.
    #[error("{0}")]
    Backend(#[source] E),
}

impl<E: std::error::Error + 'static> HookError<E> {
    /// A rejection with a reason in words.
    pub fn message(message: impl Into<Cow<'static, str>>) -> Self {
        HookError::Message(message.into())
    }
}

/// What a hook returns.
pub type HookResult<E> = Result<(), HookError<E>>;

/// The future an async hook returns (boxed: hooks are the pool's configuration, called on
/// the paths that create and recycle objects, never on a plain checkout).
pub type HookFuture<'a, E> = Pin<Box<dyn Future<Output = HookResult<E>> + Send + 'a>>;

type SyncHook<M> =
    dyn Fn(&mut <M as Manager>::Type, &Meta) -> HookResult<<M as Manager>::Error> + Send + Sync;
type AsyncHook<M> = dyn for<'a> Fn(&'a mut <M as Manager>::Type, &'a Meta) -> HookFuture<'a, <M as Manager>::Error>
    + Send
    + Sync;

/// A hook the pool runs on an object: after creating it
/// ([`post_create`](super::PoolBuilder::post_create)), or around recycling it
/// ([`pre_recycle`](super::PoolBuilder::pre_recycle),
/// [`post_recycle`](super::PoolBuilder::post_recycle)). An `Err` rejects the object.
pub struct Hook<M: Manager> {
    call: HookCall<M>,
}

enum HookCall<M: Manager> {
    Sync(Box<SyncHook<M>>),
    Async(Box<AsyncHook<M>>),
}

impl<M: Manager> Hook<M> {
    /// A hook that runs to its end without awaiting.
    pub fn sync_fn(
        hook: impl Fn(&mut M::Type, &Meta) -> HookResult<M::Error> + Send + Sync + 'static,
    ) -> Self {
        Hook {
            call: HookCall::Sync(Box::new(hook)),
        }
    }

    /// A hook that awaits (returns a boxed future, e.g. `Box::pin(async move { .. })`).
    pub fn async_fn(
        hook: impl for<'a> Fn(&'a mut M::Type, &'a Meta) -> HookFuture<'a, M::Error>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        Hook {
            call: HookCall::Async(Box::new(hook)),
        }
    }

    /// Runs the hook. A sync hook's call and an async hook's creation of its future are
    /// guarded by the caller (the pool polls the whole hook run under a panic guard).
    pub(super) async fn run(&self, object: &mut M::Type, meta: &Meta) -> HookResult<M::Error> {
        match &self.call {
            HookCall::Sync(hook) => hook(object, meta),
            HookCall::Async(hook) => hook(object, meta).await,
        }
    }
}

impl<M: Manager> fmt::Debug for Hook<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.call {
            HookCall::Sync(_) => "Hook::Sync",
            HookCall::Async(_) => "Hook::Async",
        })
    }
}

/// The hooks of one pool, in the order they were added to the builder.
pub(super) struct Hooks<M: Manager> {
    pub(super) post_create: Vec<Hook<M>>,
    pub(super) pre_recycle: Vec<Hook<M>>,
    pub(super) post_recycle: Vec<Hook<M>>,
    pub(super) error_sink: Option<ErrorSink<M::Error>>,
}

/// Where a pool tells the failures of its own work, which no caller sees (bb8's
/// `error_sink`): creations for `min_idle` and creations finished after their caller left.
/// Called on the thread that failed; keep it short. See [`PoolBuilder::error_sink`].
///
/// [`PoolBuilder::error_sink`]: super::PoolBuilder::error_sink
pub type ErrorSink<E> = Box<dyn Fn(&super::PoolError<E>) + Send + Sync>;

impl<M: Manager> Hooks<M> {
    /// Whether there is a `pre_recycle` or `post_recycle` hook.
    #[inline]
    pub(super) fn any_recycle(&self) -> bool {
        !self.pre_recycle.is_empty() || !self.post_recycle.is_empty()
    }
}

impl<M: Manager> Default for Hooks<M> {
    fn default() -> Self {
        Hooks {
            post_create: Vec::new(),
            pre_recycle: Vec::new(),
            post_recycle: Vec::new(),
            error_sink: None,
        }
    }
}

impl<M: Manager> fmt::Debug for Hooks<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("post_create", &self.post_create.len())
            .field("pre_recycle", &self.pre_recycle.len())
            .field("post_recycle", &self.post_recycle.len())
            .field("error_sink", &self.error_sink.is_some())
            .finish()
    }
}

/// Runs `hooks` in order on `object`, stopping at the first rejection.
pub(super) async fn run_hooks<M: Manager>(
    hooks: &[Hook<M>],
    object: &mut M::Type,
    meta: &Meta,
) -> HookResult<M::Error> {
    for hook in hooks {
        hook.run(object, meta).await?;
    }
    Ok(())
}

/// What the pool knows about one object, shown to [`Manager::recycle`], the hooks and
/// [`Pool::retain`](super::Pool::retain). Times are on the pool's clock.
///
/// Cheap to make: it holds the pool's stamps and converts them to instants only when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The pool's time zero.
    base: quanta::Instant,
    /// Nanoseconds after `base`.
    created: u64,
    /// Nanoseconds after `base`.
    returned: Option<u64>,
    recycle_count: u64,
}

impl Meta {
    pub(super) fn new(
        base: quanta::Instant,
        created: u64,
        returned: Option<u64>,
        recycle_count: u64,
    ) -> Self {
        Meta {
            base,
            created,
            returned,
            recycle_count,
        }
    }

    /// When the object was created.
    pub fn created(&self) -> crate::Instant {
        crate::Instant(self.base + Duration::from_nanos(self.created))
    }

    /// When it last came back to the pool (`None` before its first return). Under a
    /// background reaper returns read no clock: this is the pool's recent time, at most one
    /// reap interval early (exact on a mock clock); without one each return reads the clock.
    /// Idle times computed from it are never too short.
    pub fn returned(&self) -> Option<crate::Instant> {
        self.returned
            .map(|returned| crate::Instant(self.base + Duration::from_nanos(returned)))
    }

    /// How many times it was recycled (checked out again after a return).
    pub fn recycle_count(&self) -> u64 {
        self.recycle_count
    }

    /// The object's age at `now`.
    pub fn age(&self, now: crate::Instant) -> Duration {
        now.saturating_duration_since(self.created())
    }

    /// How long it has been idle at `now` (since its last return, or its creation).
    pub fn idle(&self, now: crate::Instant) -> Duration {
        now.saturating_duration_since(self.returned().unwrap_or_else(|| self.created()))
    }
}
