//! Establishment: the leader's connect, reattach-or-bootstrap and persist, driven inside the
//! leader's own `acquire` and handed to a task only if that caller is cancelled.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use super::{
    bump, source, Connector, Live, LoopId, Outcome, SessionContext, SessionError, SessionRecord,
    SessionStore, Shared, StoreOp,
};
use crate::error::Reach;
use crate::flight::{Flight, Hashed, KeyHash};
use crate::limit::OwnedPermit;
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
            self.connector.close(&conn);
        }
    }
}

impl<C: Connector, S> Lead<C, S> {
    /// The session key with its registry hash.
    pub(super) fn hashed(&self) -> Hashed<'_, str> {
        Hashed::new(&self.key, self.hash)
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
        let prewarmed = shared.idle.lock().pop();
        let conn = match prewarmed {
            Some(conn) => conn,
            None => {
                bump(&shared.counters.connects);
                connector
                    .connect()
                    .await
                    .map_err(|error| SessionError::Connect {
                        source: source(error),
                        reach: Reach::NotSent,
                    })?
            }
        };
        let opened = Opened {
            conn: Some(conn),
            connector,
        };
        let Some(conn) = opened.get() else {
            unreachable!("`opened` was just built with a connection")
        };
        let stored =
            shared
                .store
                .loop_id(&self.key)
                .await
                .map_err(|error| SessionError::Store {
                    op: StoreOp::Lookup,
                    source: source(error),
                    reach: Reach::NotSent,
                })?;
        self.reach = Reach::MaybeApplied;
        let (loop_id, origin) = match stored.filter(LoopId::is_attachable) {
            Some(stored) => match connector.reattach(conn, &stored).await {
                Ok(()) => (stored, Origin::Reattached),
                Err(reattach) => match connector.bootstrap(conn, &self.key, &ctx).await {
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
            None => match connector.bootstrap(conn, &self.key, &ctx).await {
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
            if let Err(error) = shared.store.touch(&self.key).await {
                tracing::warn!(session = %self.key, %error, "session store touch failed");
            }
        } else {
            // The context is the establishment's own copy: its strings move into the record.
            let record = SessionRecord {
                session: String::from(&*self.key),
                loop_id: loop_id.clone(),
                workspace: ctx.workspace,
                user: ctx.user,
            };
            shared
                .store
                .save(record)
                .await
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
                let now = shared.ns(shared.clock.now());
                let live = Live::start(
                    conn,
                    Arc::clone(&self.key),
                    loop_id,
                    origin,
                    now,
                    self.permit.take(),
                    Arc::clone(&shared.connector),
                    Arc::clone(counters),
                );
                match shared
                    .registry
                    .install(self.hashed(), &self.flight, Arc::clone(&live))
                {
                    Ok(()) => {
                        shared.queue_reader(&live);
                        bump(match origin {
                            Origin::Reattached => &counters.reattaches,
                            Origin::Bootstrapped | Origin::BootstrappedAfterReattach => {
                                &counters.bootstraps
                            }
                        });
                        Ok(live)
                    }
                    Err(live) => {
                        // Released or stopped while we worked: the connection is ours to close.
                        live.retire();
                        bump(&counters.failures);
                        Err(if shared.registry.is_closed() {
                            SessionError::Closed
                        } else {
                            SessionError::Released {
                                reach: Reach::MaybeApplied,
                            }
                        })
                    }
                }
            }
            Err(error) => {
                drop(self.permit.take());
                shared.registry.abandon(self.hashed(), &self.flight);
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
pub(super) struct Drive<C: Connector> {
    /// `None` once finished.
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
        match establishment.as_mut().poll(cx) {
            Poll::Ready(outcome) => {
                self.establishment = None;
                Poll::Ready(outcome)
            }
            Poll::Pending => Poll::Pending,
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
        // Dropped mid-establishment (runtime shutdown) or unwinding from a panic: the open
        // connection, if any, was closed by `Opened`'s drop already.
        drop(self.permit.take());
        let shared = &self.shared;
        shared.registry.abandon(self.hashed(), &self.flight);
        bump(&shared.counters.failures);
        shared.counters.establishing.decr();
        self.flight
            .complete(Err(SessionError::Aborted { reach: self.reach }));
    }
}
