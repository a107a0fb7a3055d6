//! Live connections: the installed connection with its use stamp and event reader, and the
//! [`Session`] handle callers hold.

use std::fmt;
use std::ops::Deref;

use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::establish::call;
use super::{close_contained, Connector, Counters, LoopId, Origin, EVENT_BUFFER};
use crate::panic::catch;
use crate::protocol::flight::{self, Lent, Tenant, UseStamp};
use crate::protocol::limit::OwnedPermit;
use crate::sync::{Arc, AtomicBool, Mutex, Ordering};

/// An established session's connection and what it owns.
pub(super) struct Live<C: Connector> {
    pub(super) conn: C::Conn,
    pub(super) session: Arc<str>,
    pub(super) loop_id: LoopId,
    pub(super) origin: Origin,
    /// Last use, or retired. INVARIANT: resources in `owned` are freed exactly by the caller
    /// that moved this to `RETIRED`.
    pub(super) stamp: UseStamp,
    /// Set when the event reader ends (stream over or aborted): the session is dead.
    pub(super) reader_done: AtomicBool,
    /// INVARIANT: set exactly while this record is counted in `Counters::active`.
    pub(super) installed: AtomicBool,
    /// The capacity and reader this record owns until retired.
    pub(super) owned: Mutex<Owned>,
    /// The event channel, opened by whichever comes first: the reader's first event or the
    /// caller's [`Session::take_events`].
    pub(super) events: Mutex<Events<C::Event>>,
    pub(super) connector: Arc<C>,
    pub(super) counters: Arc<Counters>,
}

#[derive(Default)]
pub(super) struct Owned {
    pub(super) permit: Option<OwnedPermit>,
    pub(super) reader: Option<AbortHandle>,
}

/// A session's event channel, opened on first need: most sessions' events are never taken,
/// and many connections never send one, so a channel (two allocations, one cache-aligned) per
/// establishment would be paid for nothing. Seen from outside it behaves as a channel opened
/// with the reader: events are buffered (up to [`EVENT_BUFFER`]) until the caller takes the
/// receiver, and the receiver sees the end of the stream once the reader has ended.
pub(super) struct Events<E> {
    /// Whether the channel exists. INVARIANT: once set, `sender` and `receiver` have each been
    /// `Some` and are each taken at most once.
    pub(super) opened: bool,
    /// The sending end, waiting for the reader to take it at its first event. INVARIANT:
    /// `None` once the reader has ended (so a receiver sees the stream's end).
    pub(super) sender: Option<mpsc::Sender<E>>,
    /// The receiving end, until the caller takes it.
    pub(super) receiver: Option<mpsc::Receiver<E>>,
    /// Set when the reader ends (stream over or aborted).
    pub(super) reader_ended: bool,
}

impl<E> Events<E> {
    pub(super) fn new() -> Self {
        Self {
            opened: false,
            sender: None,
            receiver: None,
            reader_ended: false,
        }
    }

    /// Opens the channel if it is not open yet.
    pub(super) fn open(&mut self) {
        if !self.opened {
            let (sender, receiver) = mpsc::channel(EVENT_BUFFER);
            self.opened = true;
            // A reader that has ended already never sends: dropping the sender closes the
            // channel, so the receiver sees the end of the stream at once.
            self.sender = (!self.reader_ended).then_some(sender);
            self.receiver = Some(receiver);
        }
    }
}

impl<C: Connector> Live<C> {
    /// Builds the record and counts it active. Its event reader is started later, by a
    /// [`Starter`], if the record is still live by then.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        conn: C::Conn,
        session: Arc<str>,
        loop_id: LoopId,
        origin: Origin,
        now: u64,
        permit: Option<OwnedPermit>,
        connector: Arc<C>,
        counters: Arc<Counters>,
    ) -> Arc<Self> {
        counters.active.incr();
        Arc::new(Live {
            conn,
            session,
            loop_id,
            origin,
            stamp: UseStamp::new(now),
            reader_done: AtomicBool::new(false),
            installed: AtomicBool::new(true),
            owned: Mutex::new(Owned {
                permit,
                reader: None,
            }),
            events: Mutex::new(Events::new()),
            connector,
            counters,
        })
    }

    /// Spawns the event reader (on the current runtime), unless the record was retired
    /// first. Called once per record, by a [`Starter`].
    pub(super) fn start_reader(self: &Arc<Self>) {
        let mut owned = self.owned.lock();
        // `free` runs after the stamp is retired and takes `owned` under this lock: either it
        // finds the reader here (and aborts it) or we see the stamp retired (and spawn none).
        if self.stamp.is_retired() || owned.reader.is_some() {
            return;
        }
        let reader = tokio::spawn(read_events(Arc::clone(self)));
        owned.reader = Some(reader.abort_handle());
    }

    /// Whether the reader still runs and the connector says the connection is up. A panic of
    /// the connector's `is_alive` is counted and logged, and the connection taken for dead.
    #[inline]
    pub(super) fn is_alive(&self) -> bool {
        if self.reader_done.load(Ordering::Acquire) {
            return false;
        }
        match catch(|| self.connector.is_alive(&self.conn)) {
            Ok(alive) => alive,
            Err(panic) => {
                self.counters
                    .contained("session connector (is_alive)", &panic);
                false
            }
        }
    }
}

impl<C: Connector> Tenant for Live<C> {
    fn stamp(&self) -> &UseStamp {
        &self.stamp
    }

    #[inline]
    fn is_alive(&self) -> bool {
        Live::is_alive(self)
    }

    /// Closes the connection, stops the reader and returns the capacity (last, so a new
    /// session never overlaps a connection still open). Called once, by the stamp's retirer.
    fn free(&self) {
        let owned = std::mem::take(&mut *self.owned.lock());
        close_contained(&*self.connector, &self.counters, &self.conn);
        if let Some(reader) = owned.reader {
            reader.abort();
        }
        if self.installed.swap(false, Ordering::AcqRel) {
            self.counters.active.decr();
        }
        drop(owned.permit);
    }
}

impl<C: Connector> Drop for Live<C> {
    fn drop(&mut self) {
        // Every path retires a record before letting go of it; this is the safety net for a
        // runtime torn down around a live pool.
        flight::retire(self);
    }
}

/// Marks the reader ended however its task ends (stream over, or aborted).
pub(super) struct ReaderDone<C: Connector>(Arc<Live<C>>);

impl<C: Connector> Drop for ReaderDone<C> {
    fn drop(&mut self) {
        let live = &self.0;
        {
            let mut events = live.events.lock();
            events.reader_ended = true;
            // Not taken yet (no event came): drop it so a receiver sees the end.
            events.sender = None;
        }
        live.reader_done.store(true, Ordering::Release);
    }
}

/// The event reader: forwards events until the stream ends, opening the channel at the first
/// one. If the caller dropped its receiver the events are drained and discarded, so the
/// connection never stalls on us.
async fn read_events<C: Connector>(live: Arc<Live<C>>) {
    let done = ReaderDone(live);
    let live = &done.0;
    let mut sender: Option<mpsc::Sender<C::Event>> = None;
    let connector = &*live.connector;
    // A panic of `next_event` (counted and logged by `call`) ends the reader like the end of
    // the stream: the session is dead and is rebuilt on its next acquire.
    while let Ok(Some(event)) = call(&live.counters, "session connector (next_event)", || {
        connector.next_event(&live.conn)
    })
    .await
    {
        let events = match &sender {
            Some(events) => events,
            None => {
                let mut slot = live.events.lock();
                slot.open();
                match slot.sender.take() {
                    Some(taken) => sender.insert(taken),
                    // Unreachable (only this reader takes it, and it has not ended): discard.
                    None => continue,
                }
            }
        };
        // Cancel-safe: aborting here drops the event, which nobody would read anyway.
        if events.send(event).await.is_err() {
            continue;
        }
    }
}

/// A session's connection, as handed out by [`SessionPool::acquire`](super::SessionPool::acquire). Cheap to clone; every
/// caller of one session shares the one connection. It derefs to the connection.
///
/// Holding it does not keep the session active: after a release, reap or stop the
/// connection is closed and [`Session::is_open`] is false.
pub struct Session<C: Connector> {
    /// A prepaid reference through the session's hint (a hot acquire), or an `Arc` clone.
    pub(super) live: Lent<Live<C>>,
}

impl<C: Connector> Session<C> {
    /// The connection.
    pub fn connection(&self) -> &C::Conn {
        &self.live.conn
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.live.session
    }

    /// The daemon loop the connection is attached to.
    pub fn loop_id(&self) -> &LoopId {
        &self.live.loop_id
    }

    /// How the connection was established.
    pub fn origin(&self) -> Origin {
        self.live.origin
    }

    /// The receiving end of the session's event channel ([`EVENT_BUFFER`] events). The first
    /// call gets it; later calls (from any handle of this connection) get `None`.
    pub fn take_events(&self) -> Option<mpsc::Receiver<C::Event>> {
        let mut events = self.live.events.lock();
        events.open();
        events.receiver.take()
    }

    /// Whether the connection is still the session's: not retired, reader running, and the
    /// connector says it is up.
    pub fn is_open(&self) -> bool {
        !self.live.stamp.is_retired() && self.live.is_alive()
    }

    /// Whether two handles share one connection.
    pub fn same_connection(&self, other: &Session<C>) -> bool {
        self.live.ptr_eq(&other.live)
    }
}

impl<C: Connector> Clone for Session<C> {
    fn clone(&self) -> Self {
        Self {
            live: self.live.clone(),
        }
    }
}

impl<C: Connector> Deref for Session<C> {
    type Target = C::Conn;

    fn deref(&self) -> &C::Conn {
        &self.live.conn
    }
}

impl<C: Connector> fmt::Debug for Session<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id())
            .field("loop_id", self.loop_id())
            .field("origin", &self.origin())
            .field("open", &self.is_open())
            .finish()
    }
}

impl<C: Connector> fmt::Debug for Live<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Live")
            .field("session", &self.session)
            .field("loop_id", &self.loop_id)
            .field("stamp", &self.stamp)
            .finish_non_exhaustive()
    }
}
