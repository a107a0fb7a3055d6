//! Establishment: the leader's connect, reattach-or-bootstrap and persist, driven inside the
//! leader's own `acquire` and handed to a task only if that caller is cancelled.
//!
//! Every call into the connector and the store goes through [`call`], which catches a panic
//! in the call and in every poll of the future it returned: a panic becomes
//! [`SessionError::Panicked`] for the flight's callers (with the reach of the stage it hit),
//! the connection opened so far is closed, and the permit goes back.

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::Poll;

use super::key::Id;
use super::{
    bump, close_contained, source, Connector, Counters, Live, LoopId, Outcome, SessionContext,
    SessionError, SessionRecord, SessionStore, Shared, Stage, StoreOp,
};
use crate::error::Reach;
use crate::panic::{catch, drop_guarded, report, CatchUnwind, Panic};
use crate::protocol::flight::{Flight, Hashed, KeyHash};
use crate::protocol::limit::OwnedPermit;
use crate::sync::Arc;

/// How a session's connection was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A new loop was bootstrapped (the store had no usable loop id).
    Bootstrapped,
    /// Reattached to the stored loop.
    Reattached,
    /// Reattaching failed; a new loop was bootstrapped instead.
    BootstrappedAfterReattach,
}

/// Calls user code that returns a future (`make`) and awaits the future, catching a panic in
/// the call or in any poll: the panic is counted and logged as `place`'s, and returned; the
/// panicked future is never polled again.
pub(super) async fn call<F: Future>(
    counters: &Counters,
    place: &'static str,
    make: impl FnOnce() -> F,
) -> Result<F::Output, Panic> {
    let caught = match catch(make) {
        Ok(future) => {
            let mut future = pin!(future);
            CatchUnwind::new(future.as_mut()).await
        }
        Err(panic) => Err(panic),
    };
    if let Err(panic) = &caught {
        counters.contained(place, panic);
    }
    caught
}

/// A leader's establishment, owned by its future ([`Drive`]). Its `Drop` ends the flight if the future
/// is dropped or unwinds before [`Lead::finish`].
pub(super) struct Lead<C: Connector, S> {
    pub(super) shared: Arc<Shared<C, S>>,
    pub(super) key: Arc<str>,
    /// `key`'s hash in the registry (computed by the acquire that claimed it).
    pub(super) hash: KeyHash,
    pub(super) flight: Arc<Flight<Outcome<C>>>,
    /// INVARIANT: `Some` until moved into the `Live` or dropped before the flight completes.
    pub(super) permit: Option<OwnedPermit>,
    /// `MaybeApplied` once a bootstrap or reattach has been started.
    pub(super) reach: Reach,
    pub(super) finished: bool,
}

/// An open connection not yet owned by a `Live`: closed on drop unless taken.
pub(super) struct Opened<'a, C: Connector> {
    pub(super) conn: Option<C::Conn>,
    pub(super) connector: &'a C,
    pub(super) counters: &'a Counters,
}

impl<C: Connector> Opened<'_, C> {
    pub(super) fn get(&self) -> Option<&C::Conn> {
        self.conn.as_ref()
    }

    pub(super) fn take(mut self) -> Option<C::Conn> {
        self.conn.take()
    }
}

impl<C: Connector> Drop for Opened<'_, C> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            close_contained(self.connector, self.counters, &conn);
        }
    }
}

impl<C: Connector, S> Lead<C, S> {
    /// The session key with its registry hash.
    pub(super) fn hashed(&self) -> Hashed<'_, Id> {
        Hashed::new(Id::new(&self.key), self.hash)
    }
}

impl<C: Connector, S: SessionStore> Lead<C, S> {
    /// The establishment future's body: its output is the flight's outcome.
    pub(super) async fn run(mut self, ctx: SessionContext) -> Outcome<C> {
        let result = self.establish(ctx).await;
        self.finish(result)
    }

    /// Connect, look up, reattach or bootstrap, persist. On error the connection is closed
    /// (by `Opened`'s drop) before this returns.
    pub(super) async fn establish(
        &mut self,
        ctx: SessionContext,
    ) -> Result<(C::Conn, LoopId, Origin), SessionError> {
        let shared = Arc::clone(&self.shared);
        let connector = &*shared.connector;
        let store = &shared.store;
        let counters = &*shared.counters;
        let key = &*self.key;
        let prewarmed = shared.idle.lock().pop();
        let conn = match prewarmed {
            Some(conn) => conn,
            None => {
                bump(&counters.connects);
                call(counters, Stage::Connect.place(), || {
                    connector.connect_for(key)
                })
                .await
                .map_err(|panic| Stage::Connect.panicked(panic))?
                .map_err(|error| SessionError::Connect {
                    source: source(error),
                    reach: Reach::NotSent,
                })?
            }
        };
        let opened = Opened {
            conn: Some(conn),
            connector,
            counters,
        };
        let Some(conn) = opened.get() else {
            unreachable!("`opened` was just built with a connection")
        };
        let stored = call(counters, Stage::Lookup.place(), || store.loop_id(key))
            .await
            .map_err(|panic| Stage::Lookup.panicked(panic))?
            .map_err(|error| SessionError::Store {
                op: StoreOp::Lookup,
                source: source(error),
                reach: Reach::NotSent,
            })?;
        self.reach = Reach::MaybeApplied;
        let bootstrap = || connector.bootstrap(conn, key, &ctx);
        let (loop_id, origin) = match stored.filter(LoopId::is_attachable) {
            Some(stored) => match call(counters, Stage::Reattach.place(), || {
                connector.reattach(conn, &stored)
            })
            .await
            .map_err(|panic| Stage::Reattach.panicked(panic))?
            {
                Ok(()) => (stored, Origin::Reattached),
                Err(reattach) => match call(counters, Stage::Bootstrap.place(), bootstrap)
                    .await
                    .map_err(|panic| Stage::Bootstrap.panicked(panic))?
                {
                    Ok(fresh) => (fresh, Origin::BootstrappedAfterReattach),
                    Err(bootstrap) => {
                        return Err(SessionError::Reattach {
                            loop_id: stored,
                            reattach: source(reattach),
                            bootstrap: source(bootstrap),
                            reach: Reach::MaybeApplied,
                        })
                    }
                },
            },
            None => match call(counters, Stage::Bootstrap.place(), bootstrap)
                .await
                .map_err(|panic| Stage::Bootstrap.panicked(panic))?
            {
                Ok(fresh) => (fresh, Origin::Bootstrapped),
                Err(error) => {
                    return Err(SessionError::Bootstrap {
                        source: source(error),
                        reach: Reach::MaybeApplied,
                    })
                }
            },
        };
        if origin == Origin::Reattached {
            // Advisory: a failed touch is logged; a panicked one is counted and logged by
            // `call`. Neither fails the establishment.
            let touched = call(counters, "session store (touch)", || store.touch(key)).await;
            if let Ok(Err(error)) = touched {
                tracing::warn!(session = %key, %error, "session store touch failed");
            }
        } else {
            // The context is the establishment's own copy: its strings move into the record.
            let record = SessionRecord {
                session: String::from(key),
                loop_id: loop_id.clone(),
                workspace: ctx.workspace,
                user: ctx.user,
            };
            call(counters, Stage::Save.place(), || store.save(record))
                .await
                .map_err(|panic| Stage::Save.panicked(panic))?
                .map_err(|error| SessionError::Store {
                    op: StoreOp::Save,
                    source: source(error),
                    reach: Reach::MaybeApplied,
                })?;
        }
        match opened.take() {
            Some(conn) => Ok((conn, loop_id, origin)),
            None => unreachable!("the connection is taken only here"),
        }
    }

    /// Installs the connection (or disposes of it), completes the flight and returns its
    /// outcome.
    pub(super) fn finish(
        &mut self,
        result: Result<(C::Conn, LoopId, Origin), SessionError>,
    ) -> Outcome<C> {
        self.finished = true;
        let shared = Arc::clone(&self.shared);
        let counters = &shared.counters;
        let outcome = match result {
            Ok((conn, loop_id, origin)) => {
                let live = Live::start(
                    conn,
                    Arc::clone(&self.key),
                    loop_id,
                    origin,
                    shared.now(),
                    self.permit.take(),
                    Arc::clone(&shared.connector),
                    Arc::clone(counters),
                );
                // Refused (released or stopped while we worked): the directory retired the
                // connection, which closed it and returned its permit.
                let installed = shared.directory.install(self.hashed(), &self.flight, live);
                match &installed {
                    Ok(live) => {
                        shared.queue_reader(live);
                        bump(match origin {
                            Origin::Reattached => &counters.reattaches,
                            Origin::Bootstrapped | Origin::BootstrappedAfterReattach => {
                                &counters.bootstraps
                            }
                        });
                    }
                    Err(_) => bump(&counters.failures),
                }
                installed
            }
            Err(error) => {
                drop(self.permit.take());
                shared.directory.abandon(self.hashed(), &self.flight);
                bump(&counters.failures);
                Err(error)
            }
        };
        counters.establishing.decr();
        self.flight.complete(outcome.clone());
        outcome
    }
}

/// The leader's establishment, driven inside the leader's own `acquire` (no task spawn, no
/// cross-task wake-up on the common path). If the leader is dropped before it finishes,
/// `Drop` hands the same pinned future to the runtime as a task, so the establishment still
/// completes, is cached, and reaches the followers: exactly what a spawned-from-the-start
/// establishment would do, paid for only when a leader is cancelled.
///
/// User code inside the establishment is guarded call by call ([`call`]); the driver guards
/// each poll of the whole as well, so that nothing can unwind through the leader's `acquire`
/// and leave an establishment that panicked for `Drop` to resume on a runtime worker.
pub(super) struct Drive<C: Connector> {
    /// `None` once finished (or once it panicked).
    pub(super) establishment: Option<Pin<Box<dyn Future<Output = Outcome<C>> + Send + 'static>>>,
    /// Where to finish it if the leader goes away.
    pub(super) runtime: tokio::runtime::Handle,
}

impl<C: Connector> Future for Drive<C> {
    type Output = Outcome<C>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Outcome<C>> {
        let Some(establishment) = self.establishment.as_mut() else {
            // Polled again after it finished: `acquire` never does.
            return Poll::Ready(Err(SessionError::Aborted {
                reach: Reach::MaybeApplied,
            }));
        };
        match catch(|| establishment.as_mut().poll(cx)) {
            Ok(Poll::Ready(outcome)) => {
                self.establishment = None;
                Poll::Ready(outcome)
            }
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => {
                // Unreachable through user code (each call is guarded); a panic here is the
                // pool's own. `Lead`'s drop ran during the unwind: it returned the permit and
                // failed the flight with `Aborted`, which the leader reports too. The
                // establishment is never polled (nor spawned) again.
                report("session establishment", &panic);
                drop_guarded(self.establishment.take());
                Poll::Ready(Err(SessionError::Aborted {
                    reach: Reach::MaybeApplied,
                }))
            }
        }
    }
}

impl<C: Connector> Drop for Drive<C> {
    fn drop(&mut self) {
        if let Some(establishment) = self.establishment.take() {
            // A runtime that is shutting down drops it instead; `Lead`'s drop then fails the
            // flight with `Aborted` and returns the capacity.
            drop(self.runtime.spawn(establishment));
        }
    }
}

impl<C: Connector, S> Drop for Lead<C, S> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // Dropped mid-establishment (runtime shutdown) or unwinding from a panic of the pool's
        // own: the open connection, if any, was closed by `Opened`'s drop already.
        drop(self.permit.take());
        let shared = &self.shared;
        shared.directory.abandon(self.hashed(), &self.flight);
        bump(&shared.counters.failures);
        shared.counters.establishing.decr();
        self.flight
            .complete(Err(SessionError::Aborted { reach: self.reach }));
    }
}
