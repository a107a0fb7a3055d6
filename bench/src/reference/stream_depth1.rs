//! R1 at depth 1: the design the system behind R1 moved to when it gave up pipelining
//! (SEEDS.md, R1, *Known flaws*), rebuilt faithfully so that slotpool's
//! [`StreamPool`](slotpool::stream::StreamPool) at `max_queue_depth(1)` can be measured against
//! it. It answers R1's own open question: is one mutex around an ordered map fast enough?
//!
//! # The design
//!
//! * Every stream is **exclusive**: one caller, one request in flight at a time. Idle streams
//!   sit in a `std::sync::Mutex<BTreeMap<StreamId, Idle>>`; a stream checked out is not in the
//!   map, its request sender moves into the caller's guard.
//! * `get()` first takes an owned permit from a `tokio::sync::Semaphore` of `max_streams`
//!   permits (callers wait on it asynchronously; `None`: unbounded, no semaphore), as R1 does
//!   with `max_streams × max_queue_depth` at depth 1. Then it locks the map and **pops the
//!   lowest id** (`BTreeMap::pop_first`), so low streams stay busy and high ones drain and can
//!   be reaped. Lowest-id-first is why the map cannot be sharded.
//! * When no stream is idle, `get()` opens one: it takes the next id, makes the request
//!   channel, spawns the stream's task (which connects, in its own task, with no lock held) and
//!   returns at once; the caller's request waits in the channel until the connect is done.
//! * The stream task is R1's own ([`super::stream`]): it forwards `(request, oneshot
//!   responder)` pairs and routes responses by request id; a stream error or close ends it,
//!   fails the pending caller ("stream closed") and removes the stream from the map if it is
//!   idle there.
//! * The guard gives the stream back only after a **complete response**: dropping it re-inserts
//!   the stream (locking the map again, stamping `Instant::now()` as its idle time), then drops
//!   the permit (whose release locks the semaphore's waiter list). A guard dropped while its
//!   request is in flight (the caller cancelled the `send` future after the request was
//!   queued) does **not** give the stream back: a later caller would receive the stale
//!   response, or wait behind it. It drops the stream instead (its sender goes, so its task
//!   ends). This is the cancellation fix that made the system give up pipelining. A stream
//!   whose task has ended is not given back either.
//! * The reaper removes streams idle since before `now - threshold`, as R1's does.
//! * Guards and tasks hold only weak references to the pool, so dropping the pool drops the
//!   map and with it every idle stream's sender: their tasks then end.
//!
//! # Costs kept on purpose
//!
//! Per `get()` and drop of an idle stream: the semaphore's acquire (an `Arc` clone and a CAS)
//! and release (a lock of its waiter list), two lock/unlock pairs of the std mutex, one
//! `pop_first` and one `insert` on the `BTreeMap` (with one stream idle, popping it frees the
//! tree's only node and the insert allocates it again), and one `Instant::now()`. Nothing
//! slower was added: the map is never scanned, no sender is cloned per request (it moves
//! between the map and the guard), and the lock is never held across an `await` or a connect.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use slotpool::stream::Connector;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use super::stream::{spawn_reaper, spawn_stream, RefConnector, RefError, RequestSender, StreamId};

/// An idle stream in the map.
struct Idle<C: Connector> {
    /// Requests for the stream's task.
    sender: RequestSender<C>,
    /// When the stream was given back.
    idle_since: Instant,
}

struct Inner<C: Connector> {
    /// Shared with the stream tasks (which must not keep the pool alive).
    connector: Arc<C>,
    /// Idle streams by id. INVARIANT: a stream is here or in exactly one guard, never both.
    idle: Mutex<BTreeMap<StreamId, Idle<C>>>,
    next_stream_id: AtomicUsize,
    /// `max_streams` permits; `None` for an unbounded pool.
    limiter: Option<Arc<Semaphore>>,
}

impl<C: Connector> Inner<C> {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<StreamId, Idle<C>>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// R1's depth-1 stream pool. See the [module documentation](self).
pub struct RefDepth1Pool<C: RefConnector> {
    inner: Arc<Inner<C>>,
}

impl<C: RefConnector> fmt::Debug for RefDepth1Pool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefDepth1Pool")
            .field("idle", &self.idle())
            .finish_non_exhaustive()
    }
}

impl<C: RefConnector> RefDepth1Pool<C> {
    /// A pool of at most `max_streams` checked-out streams (`None`: unbounded, no semaphore).
    ///
    /// # Panics
    /// If `max_streams` is zero.
    pub fn new(connector: C, max_streams: Option<usize>) -> Self {
        assert!(max_streams != Some(0), "max_streams must be at least 1");
        Self {
            inner: Arc::new(Inner {
                connector: Arc::new(connector),
                idle: Mutex::new(BTreeMap::new()),
                next_stream_id: AtomicUsize::new(0),
                limiter: max_streams.map(|n| Arc::new(Semaphore::new(n))),
            }),
        }
    }

    /// Waits for a permit, then returns a guard on the idle stream with the lowest id, opening
    /// a new stream if none is idle. Must run within a tokio runtime.
    pub async fn get(&self) -> RefDepth1Guard<C> {
        let permit = match &self.inner.limiter {
            Some(limiter) => Some(
                Arc::clone(limiter)
                    .acquire_owned()
                    .await
                    .expect("the reference semaphore is never closed"),
            ),
            None => None,
        };
        // The hot path: one pop under the mutex.
        let popped = self.inner.lock().pop_first();
        let (id, sender) = match popped {
            Some((id, idle)) => (id, idle.sender),
            None => self.open(),
        };
        RefDepth1Guard {
            pool: Arc::downgrade(&self.inner),
            id,
            sender: Some(sender),
            reusable: true,
            permit,
        }
    }

    /// Opens a stream: its task connects and serves it; no lock is held.
    fn open(&self) -> (StreamId, RequestSender<C>) {
        let id = self.inner.next_stream_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel(1);
        let connector = Arc::clone(&self.inner.connector);
        spawn_stream(
            connector,
            receiver,
            Arc::downgrade(&self.inner),
            move |pool| {
                pool.lock().remove(&id);
            },
        );
        (id, sender)
    }

    /// One reaper pass: removes streams idle since before `now - threshold` (dropping their
    /// senders ends their tasks). Returns how many.
    pub fn reap(&self, threshold: Duration) -> usize {
        let cutoff = Instant::now().checked_sub(threshold);
        let mut idle = self.inner.lock();
        let before = idle.len();
        idle.retain(|_, stream| cutoff.is_none_or(|cutoff| stream.idle_since >= cutoff));
        before - idle.len()
    }

    /// Spawns the reaper: every `interval`, [`RefDepth1Pool::reap`] with `threshold`. It holds
    /// a weak reference and ends when the pool is dropped.
    pub fn spawn_reaper(
        &self,
        interval: Duration,
        threshold: Duration,
    ) -> tokio::task::JoinHandle<()> {
        spawn_reaper(Arc::downgrade(&self.inner), interval, move |inner| {
            RefDepth1Pool { inner }.reap(threshold);
        })
    }

    /// The ids of the idle streams, lowest first.
    pub fn idle_ids(&self) -> Vec<StreamId> {
        self.inner.lock().keys().copied().collect()
    }

    /// How many streams are idle.
    pub fn idle(&self) -> usize {
        self.inner.lock().len()
    }
}

/// Exclusive use of one stream, for one request at a time. Gives the stream back on drop if
/// no request of its is in flight.
pub struct RefDepth1Guard<C: RefConnector> {
    pool: Weak<Inner<C>>,
    id: StreamId,
    /// `None` only once dropped.
    sender: Option<RequestSender<C>>,
    /// Whether the stream may go back to the pool: false from the moment a request is queued
    /// until its response arrives, and for good once the stream has failed.
    reusable: bool,
    /// Dropped after `Drop::drop` has given the stream back (fields drop after the body).
    permit: Option<OwnedSemaphorePermit>,
}

impl<C: RefConnector> RefDepth1Guard<C> {
    /// The stream this guard holds.
    pub fn stream_id(&self) -> StreamId {
        self.id
    }

    /// Sends `request` on the guard's stream and waits for its response.
    ///
    /// Cancel-safety: dropping the future before the request is queued sends nothing and
    /// keeps the stream reusable; dropping it afterwards makes the guard drop the stream.
    ///
    /// # Errors
    /// [`RefError::InvalidArgument`] for a duplicate in-flight id, [`RefError::StreamClosed`]
    /// if the stream ends first.
    pub async fn send(&mut self, request: C::Request) -> Result<C::Response, RefError<C::Error>> {
        let Some(sender) = &self.sender else {
            return Err(RefError::StreamClosed);
        };
        let (reply, response) = oneshot::channel();
        if sender.send((request, reply)).await.is_err() {
            self.reusable = false;
            return Err(RefError::StreamClosed);
        }
        // Queued: the stream is ours until the response arrives.
        self.reusable = false;
        let result = response.await.unwrap_or(Err(RefError::StreamClosed));
        // A response, or the task's refusal of a duplicate id (which sent nothing), completes
        // the exchange; any other error means the stream is gone.
        self.reusable = matches!(result, Ok(_) | Err(RefError::InvalidArgument { .. }));
        result
    }
}

impl<C: RefConnector> Drop for RefDepth1Guard<C> {
    fn drop(&mut self) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        // A request in flight, a failed stream or an ended task: the stream drops here.
        if !self.reusable || sender.is_closed() {
            return;
        }
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        let returned = Idle {
            sender,
            idle_since: Instant::now(),
        };
        let previous = pool.lock().insert(self.id, returned);
        debug_assert!(previous.is_none(), "stream {} was idle twice", self.id);
    }
}

impl<C: RefConnector> fmt::Debug for RefDepth1Guard<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefDepth1Guard")
            .field("id", &self.id)
            .field("reusable", &self.reusable)
            .field("permit", &self.permit.is_some())
            .finish_non_exhaustive()
    }
}
