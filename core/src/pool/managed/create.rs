//! Creating an object in a claimed slot, and finishing the creation off the caller when the
//! caller stops waiting.
//!
//! [`Creating`] owns the slot's lease and the boxed creation (the manager's `create` under its
//! `create_timeout`, then the `post_create` hooks, all under a panic guard). The caller polls
//! it inline. If the caller drops it before it resolves, its destructor moves the creation
//! and the lease into a task spawned on the pool's runtime, which finishes the creation and
//! puts the object in its slot, idle (or hands it to the oldest waiter), or retires the slot
//! if the creation failed; without a runtime the creation is dropped and the slot retired.
//! Either way the slot's room is never lost or counted twice: exactly one of the caller's
//! poll, the spawned task and the destructor holds the lease and ends it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::contain::{within, Contained};
use super::manager::run_hooks;
use super::{Manager, Object, PoolError, Pooled, Shared, Stamps, Step};
use crate::panic::{catch, Panic};
use crate::protocol::exclusive::Lease;
use crate::sync::Arc;

/// The boxed creation: its output is a complete object, or why there is none.
type Build<M> = Pin<
    Box<
        dyn Future<Output = Result<Result<Pooled<M>, PoolError<<M as Manager>::Error>>, Panic>>
            + Send,
    >,
>;

/// A creation in a claimed slot. See the [module documentation](self).
pub(super) struct Creating<M: Manager> {
    shared: Arc<Shared<M>>,
    /// `Some` until the creation resolved (or moved off the caller).
    lease: Option<Lease>,
    /// `Some` until the creation resolved (or moved off the caller).
    build: Option<Build<M>>,
    /// Whether this creation is the create back-off's probe: its outcome, whatever ends it,
    /// is reported (a probe that never reported would hold creations back for good).
    probe: bool,
    /// Whether a `get` started it (the object is that get's checkout), or the pool did, to
    /// keep objects idle (`min_idle`, `build_eager`): not a checkout.
    by_get: bool,
}

impl<M: Manager> Creating<M> {
    /// The creation in `lease`'s slot, under the `create` deadline `timeout`; `probe` if the
    /// create back-off admitted it as its probe; `by_get` if a `get` started it.
    pub(super) fn new(
        shared: Arc<Shared<M>>,
        lease: Lease,
        timeout: Option<Duration>,
        probe: bool,
        by_get: bool,
    ) -> Self {
        let build: Build<M> = Box::pin(Contained::new(build(Arc::clone(&shared), timeout)));
        Creating {
            shared,
            lease: Some(lease),
            build: Some(build),
            probe,
            by_get,
        }
    }
}

/// Creates an object (within `timeout`) and runs the `post_create` hooks on it.
pub(super) async fn build<M: Manager>(
    shared: Arc<Shared<M>>,
    timeout: Option<Duration>,
) -> Result<Pooled<M>, PoolError<M::Error>> {
    let made = match catch(|| shared.manager.create()) {
        Ok(create) => match within(timeout, Contained::new(create)).await {
            Ok(made) => made,
            Err(after) => {
                return Err(PoolError::Timeout {
                    step: Step::Create,
                    after,
                })
            }
        },
        Err(panic) => Err(panic),
    };
    let mut object = match made {
        Ok(Ok(object)) => object,
        Ok(Err(error)) => return Err(PoolError::Create(error)),
        Err(panic) => {
            shared.panicked(Step::Create, &panic);
            return Err(PoolError::Panicked {
                step: Step::Create,
                panic,
            });
        }
    };
    let created = shared.time.now();
    if !shared.hooks.post_create.is_empty() {
        let meta = shared.meta(Stamps {
            created,
            returned: Stamps::NEVER,
            recycle_count: 0,
        });
        let hooked = Contained::new(run_hooks(&shared.hooks.post_create, &mut object, &meta)).await;
        let failed = match hooked {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(PoolError::PostCreateHook(error)),
            Err(panic) => {
                shared.panicked(Step::PostCreate, &panic);
                Some(PoolError::Panicked {
                    step: Step::PostCreate,
                    panic,
                })
            }
        };
        if let Some(error) = failed {
            shared.drop_object(object);
            return Err(error);
        }
    }
    Ok(Pooled::new(object, Arc::clone(&shared), created))
}

impl<M: Manager> Shared<M> {
    /// Ends a creation in `lease`'s slot: the object is occupied (counted as a checkout if
    /// `by_get`) and returned, or the slot retired and the failure counted; the create
    /// back-off hears how it went.
    fn created(
        &self,
        lease: Lease,
        built: Result<Result<Pooled<M>, PoolError<M::Error>>, Panic>,
        probe: bool,
        by_get: bool,
    ) -> Result<Object<M>, PoolError<M::Error>> {
        let built = built.unwrap_or_else(|panic| {
            // The build is contained as a whole; its own steps report their panics, so this
            // is a panic in the pool's glue around them (not expected).
            self.panicked(Step::Create, &panic);
            Err(PoolError::Panicked {
                step: Step::Create,
                panic,
            })
        });
        self.creation_ended(built.as_ref().err(), probe);
        match built {
            Ok(pooled) => {
                if by_get {
                    self.slots.occupy_born(&lease, pooled.anchor.created);
                } else {
                    self.slots.occupy_idle(&lease, pooled.anchor.created);
                }
                self.counters.created.incr();
                tracing::debug!(slot = lease.index(), "object created");
                Ok(Object::new(lease, pooled))
            }
            Err(error) => {
                self.slots.retire(lease);
                self.counters.create_failures.incr();
                // A panic was logged once already, as an error, where it was caught.
                if !matches!(error, PoolError::Panicked { .. }) {
                    tracing::warn!(%error, "creating an object failed");
                }
                Err(error)
            }
        }
    }

    /// Detaches and drops an object, each step under a panic guard (a panic is counted and
    /// logged): a new one that never entered the pool (a hook rejected it), or one leaving it.
    pub(super) fn drop_object(&self, mut object: M::Type) {
        if let Err(panic) = catch(|| self.manager.detach(&mut object)) {
            self.panicked(Step::Detach, &panic);
        }
        if let Err(panic) = catch(move || drop(object)) {
            self.panicked(Step::Detach, &panic);
        }
    }
}

impl<M: Manager> Future for Creating<M> {
    type Output = Result<Object<M>, PoolError<M::Error>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(build) = this.build.as_mut() else {
            return Poll::Ready(Err(PoolError::Panicked {
                step: Step::Create,
                panic: Panic::new("a creation polled after it resolved"),
            }));
        };
        let built = std::task::ready!(build.as_mut().poll(cx));
        this.build = None;
        let Some(lease) = this.lease.take() else {
            unreachable!("the lease is held until the creation resolves");
        };
        Poll::Ready(this.shared.created(lease, built, this.probe, this.by_get))
    }
}

impl<M: Manager> Drop for Creating<M> {
    fn drop(&mut self) {
        let (Some(lease), Some(build)) = (self.lease.take(), self.build.take()) else {
            return;
        };
        let shared = Arc::clone(&self.shared);
        let runtime = shared
            .runtime
            .clone()
            .or_else(|| tokio::runtime::Handle::try_current().ok());
        let Some(runtime) = runtime else {
            // Nowhere to finish it: drop the creation (guarded) and free the room.
            drop(build);
            shared.slots.retire(lease);
            shared.counters.create_failures.incr();
            shared.creation_abandoned(self.probe);
            tracing::debug!("creation dropped with its caller (no runtime to finish it)");
            return;
        };
        tracing::debug!(slot = lease.index(), "caller left; finishing the creation");
        let orphan = Orphan {
            shared,
            lease: Some(lease),
            probe: self.probe,
        };
        runtime.spawn(async move {
            let mut orphan = orphan;
            let built = build.await;
            orphan.finish(built);
        });
    }
}

/// A creation finished off its caller: holds the lease while the spawned task runs, and
/// retires the slot if the task is dropped before it ends (the runtime shutting down).
struct Orphan<M: Manager> {
    shared: Arc<Shared<M>>,
    lease: Option<Lease>,
    probe: bool,
}

impl<M: Manager> Orphan<M> {
    fn finish(&mut self, built: Result<Result<Pooled<M>, PoolError<M::Error>>, Panic>) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        let shared = &self.shared;
        // Its caller is gone: the object goes idle (or to a waiter, whose checkout it is),
        // not out to the get that started it.
        match shared.created(lease, built, self.probe, false) {
            Ok(object) => {
                shared.counters.created_off_caller.incr();
                // Back to the pool: idle in its slot, or to the oldest waiter.
                drop(object);
            }
            // Nobody waits for it: the pool's own failure.
            Err(error) => shared.sink(&error),
        }
    }
}

impl<M: Manager> Drop for Orphan<M> {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.shared.slots.retire(lease);
            self.shared.counters.create_failures.incr();
            self.shared.creation_abandoned(self.probe);
        }
    }
}

impl<M: Manager> fmt::Debug for Creating<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Creating")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}
