//! R1, the "reference mutex design": the multiplexed stream pool of SEEDS.md, rebuilt
//! faithfully so that slotpool's [`StreamPool`](slotpool::stream::StreamPool) can be measured
//! against it. A fast strawman would prove nothing, so this keeps R1's costs on purpose:
//!
//! * `get()` takes an owned permit from a `tokio::sync::Semaphore` of
//!   `max_streams × max_queue_depth` permits (callers wait on it asynchronously), then locks a
//!   `std::sync::Mutex<HashMap<StreamId, Entry>>` and **scans it linearly, in HashMap order**,
//!   for the first entry with `queue_depth < max_queue_depth`; it increments that entry and
//!   clones its request sender. If every entry is full it inserts a new entry with depth 1
//!   **while holding the lock**, spawns the entry's stream task and returns at once (later
//!   callers join the new stream while its task is still connecting).
//! * Dropping the guard upgrades the guard's weak pool reference, locks the map again,
//!   decrements the depth, stamps `Instant::now()` as the idle time when the depth reaches 0,
//!   and then drops the permit (whose release locks the semaphore's waiter list).
//! * The stream task connects through the same connector types as slotpool (see
//!   [`RefConnector`]) and forwards `(request, oneshot responder)` pairs onto the stream,
//!   routing each response back by request id. A duplicate in-flight id fails only that
//!   caller (invalid argument); an unknown response id is ignored; a stream error or close
//!   ends the task, drops every pending responder (callers see "stream closed") and removes
//!   the entry.
//! * A reaper removes entries idle since before `now - threshold`.
//! * Guards and tasks hold only weak references to the pool, so dropping the pool drops the
//!   map and with it every entry's sender: the stream tasks then end.
//!
//! R1's known flaws are kept too: depth is released when the guard drops, not when the
//! response arrives, so it is not enforced under cancellation.

use std::collections::HashMap;
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use slotpool::stream::{Connector, StreamRequest, StreamResponse};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

/// A stream's key in the pool's map (assigned in creation order).
pub type StreamId = usize;

/// The outbound half of a reference stream: the requests its task forwards, as a [`Stream`].
/// The reference's twin of `slotpool::stream::Outbound`, which has no public constructor.
pub struct RefOutbound<R> {
    rx: mpsc::UnboundedReceiver<R>,
}

impl<R> Stream for RefOutbound<R> {
    type Item = R;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<R>> {
        self.rx.poll_recv(cx)
    }
}

impl<R> fmt::Debug for RefOutbound<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefOutbound").finish_non_exhaustive()
    }
}

/// How the reference opens a stream: slotpool's [`Connector`] (same request, response and
/// error types) plus a `connect` that takes a [`RefOutbound`]. Implementations build the same
/// inbound stream type for both (see `crate::fixtures`).
pub trait RefConnector: Connector {
    /// The inbound half of a stream opened by the reference.
    type RefInbound: Stream<Item = Result<Self::Response, Self::Error>> + Send + Unpin + 'static;

    /// Opens a stream that sends what `outbound` yields.
    fn connect_ref(
        &self,
        outbound: RefOutbound<Self::Request>,
    ) -> impl Future<Output = Result<Self::RefInbound, Self::Error>> + Send;
}

/// Why a reference request got no response.
#[derive(Debug)]
pub enum RefError<E> {
    /// Another request with this id is in flight on the stream.
    InvalidArgument {
        /// The duplicate id.
        id: u64,
    },
    /// The stream task ended (stream error or close, or the pool was dropped).
    StreamClosed,
    /// The stream failed to open or failed (logged by the task; callers see `StreamClosed`).
    Stream(Arc<E>),
}

impl<E: fmt::Display> fmt::Display for RefError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefError::InvalidArgument { id } => write!(f, "request id {id} already in flight"),
            RefError::StreamClosed => f.write_str("stream closed"),
            RefError::Stream(e) => write!(f, "stream failed: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for RefError<E> {}

pub(crate) type Reply<C> = Result<<C as Connector>::Response, RefError<<C as Connector>::Error>>;
pub(crate) type Responder<C> = oneshot::Sender<Reply<C>>;
pub(crate) type RequestSender<C> = mpsc::Sender<(<C as Connector>::Request, Responder<C>)>;
pub(crate) type RequestReceiver<C> = mpsc::Receiver<(<C as Connector>::Request, Responder<C>)>;

/// One stream as the pool sees it.
struct Entry<C: Connector> {
    /// Requests for the stream's task.
    sender: RequestSender<C>,
    /// Requests in flight. INVARIANT: `queue_depth <= max_queue_depth`.
    queue_depth: usize,
    /// When the stream went idle. INVARIANT: `Some` exactly when `queue_depth == 0`.
    idle_since: Option<Instant>,
}

struct Inner<C: Connector> {
    /// Shared with the stream tasks (which must not keep the pool alive).
    connector: Arc<C>,
    streams: Mutex<HashMap<StreamId, Entry<C>>>,
    next_stream_id: AtomicUsize,
    max_streams: Option<usize>,
    max_queue_depth: usize,
    /// `max_streams × max_queue_depth` permits; `None` for an unbounded pool.
    limiter: Option<Arc<Semaphore>>,
}

impl<C: Connector> Inner<C> {
    fn lock(&self) -> MutexGuard<'_, HashMap<StreamId, Entry<C>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// R1's stream pool. See the [module documentation](self).
pub struct RefStreamPool<C: RefConnector> {
    inner: Arc<Inner<C>>,
}

impl<C: RefConnector> fmt::Debug for RefStreamPool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (streams, in_flight) = self.load();
        f.debug_struct("RefStreamPool")
            .field("streams", &streams)
            .field("in_flight", &in_flight)
            .finish_non_exhaustive()
    }
}

impl<C: RefConnector> RefStreamPool<C> {
    /// A pool of at most `max_streams` streams (`None`: unbounded, no semaphore) carrying up to
    /// `max_queue_depth` requests each.
    ///
    /// # Panics
    /// If `max_queue_depth` or `max_streams` is zero.
    pub fn new(connector: C, max_streams: Option<usize>, max_queue_depth: usize) -> Self {
        assert!(max_queue_depth > 0, "max_queue_depth must be at least 1");
        assert!(max_streams != Some(0), "max_streams must be at least 1");
        let limiter = max_streams.map(|n| Arc::new(Semaphore::new(n * max_queue_depth)));
        Self {
            inner: Arc::new(Inner {
                connector: Arc::new(connector),
                streams: Mutex::new(HashMap::new()),
                next_stream_id: AtomicUsize::new(0),
                max_streams,
                max_queue_depth,
                limiter,
            }),
        }
    }

    /// Waits for a permit, then returns a guard on the first stream (in HashMap order) with
    /// room, starting a new stream if none has room. Must run within a tokio runtime.
    pub async fn get(&self) -> RefStreamGuard<C> {
        let permit = match &self.inner.limiter {
            Some(limiter) => Some(
                Arc::clone(limiter)
                    .acquire_owned()
                    .await
                    .expect("the reference semaphore is never closed"),
            ),
            None => None,
        };
        let max = self.inner.max_queue_depth;
        let mut streams = self.inner.lock();
        // The hot path: a linear scan under the mutex.
        for (&id, entry) in streams.iter_mut() {
            debug_assert!(entry.queue_depth <= max, "stream queue overflow");
            debug_assert_eq!(entry.idle_since.is_some(), entry.queue_depth == 0);
            if entry.queue_depth < max {
                entry.queue_depth += 1;
                entry.idle_since = None;
                return RefStreamGuard {
                    pool: Arc::downgrade(&self.inner),
                    id,
                    sender: entry.sender.clone(),
                    permit,
                };
            }
        }
        // Every stream is full: start a new one, inserted while the lock is held. The permit
        // guarantees room (total depth < max_streams × max_queue_depth).
        debug_assert!(self.inner.max_streams.is_none_or(|n| streams.len() < n));
        let id = self.inner.next_stream_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel(max);
        streams.insert(
            id,
            Entry {
                sender: sender.clone(),
                queue_depth: 1,
                idle_since: None,
            },
        );
        let connector = Arc::clone(&self.inner.connector);
        spawn_stream(
            connector,
            receiver,
            Arc::downgrade(&self.inner),
            move |pool| {
                pool.lock().remove(&id);
            },
        );
        drop(streams);
        RefStreamGuard {
            pool: Arc::downgrade(&self.inner),
            id,
            sender,
            permit,
        }
    }

    /// One reaper pass: removes streams idle since before `now - threshold` (dropping an
    /// entry's sender ends its task once no guard holds a clone). Returns how many.
    pub fn reap(&self, threshold: Duration) -> usize {
        let cutoff = Instant::now().checked_sub(threshold);
        let mut streams = self.inner.lock();
        let before = streams.len();
        streams.retain(|_, entry| match (entry.idle_since, cutoff) {
            (Some(idle), Some(cutoff)) => idle >= cutoff,
            _ => true,
        });
        before - streams.len()
    }

    /// Spawns R1's reaper: every `interval`, [`RefStreamPool::reap`] with `threshold`. It holds
    /// a weak reference and ends when the pool is dropped.
    pub fn spawn_reaper(
        &self,
        interval: Duration,
        threshold: Duration,
    ) -> tokio::task::JoinHandle<()> {
        spawn_reaper(Arc::downgrade(&self.inner), interval, move |inner| {
            RefStreamPool { inner }.reap(threshold);
        })
    }

    /// Streams in the map and the sum of their queue depths.
    pub fn load(&self) -> (usize, usize) {
        let streams = self.inner.lock();
        (streams.len(), streams.values().map(|e| e.queue_depth).sum())
    }
}

/// Room for one request on one reference stream; gives the depth back on drop.
pub struct RefStreamGuard<C: RefConnector> {
    pool: Weak<Inner<C>>,
    id: StreamId,
    sender: RequestSender<C>,
    /// Dropped after `Drop::drop` has returned the depth (fields drop after the body).
    permit: Option<OwnedSemaphorePermit>,
}

impl<C: RefConnector> RefStreamGuard<C> {
    /// The stream this guard has room on.
    pub fn stream_id(&self) -> StreamId {
        self.id
    }

    /// Sends `request` on the guard's stream and waits for its response.
    ///
    /// # Errors
    /// [`RefError::InvalidArgument`] for a duplicate in-flight id, [`RefError::StreamClosed`]
    /// if the stream ends first.
    pub async fn send(&self, request: C::Request) -> Result<C::Response, RefError<C::Error>> {
        let (reply, response) = oneshot::channel();
        self.sender
            .send((request, reply))
            .await
            .map_err(|_| RefError::StreamClosed)?;
        response.await.map_err(|_| RefError::StreamClosed)?
    }
}

impl<C: RefConnector> Drop for RefStreamGuard<C> {
    fn drop(&mut self) {
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        let mut streams = pool.lock();
        if let Some(entry) = streams.get_mut(&self.id) {
            debug_assert!(entry.queue_depth > 0, "guard released an idle stream");
            entry.queue_depth -= 1;
            if entry.queue_depth == 0 {
                entry.idle_since = Some(Instant::now());
            }
        }
    }
}

impl<C: RefConnector> fmt::Debug for RefStreamGuard<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefStreamGuard")
            .field("id", &self.id)
            .field("permit", &self.permit.is_some())
            .finish_non_exhaustive()
    }
}

/// Spawns a stream's task: [`run_stream`], then, if the pool still exists, `remove` to take the
/// stream out of its map. The task holds only a weak reference to the pool.
pub(crate) fn spawn_stream<C: RefConnector, P: Send + Sync + 'static>(
    connector: Arc<C>,
    receiver: RequestReceiver<C>,
    pool: Weak<P>,
    remove: impl FnOnce(&P) + Send + 'static,
) {
    tokio::spawn(async move {
        if let Err(_error) = run_stream(&*connector, receiver).await {
            // R1 logs the error here; the bench has no logger.
        }
        if let Some(pool) = pool.upgrade() {
            remove(&pool);
        }
    });
}

/// Spawns R1's reaper task: every `interval`, `reap` on the pool, until the pool is dropped
/// (the task holds only a weak reference).
pub(crate) fn spawn_reaper<P: Send + Sync + 'static>(
    pool: Weak<P>,
    interval: Duration,
    reap: impl Fn(Arc<P>) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        loop {
            ticker.tick().await;
            let Some(pool) = pool.upgrade() else {
                return;
            };
            reap(pool);
        }
    })
}

/// R1's stream task: connects, then forwards requests and routes responses by id until the
/// stream ends or every sender is gone. The depth-1 design ([`super::stream_depth1`]) runs the
/// same task, spawned the same way ([`spawn_stream`]).
pub(crate) async fn run_stream<C: RefConnector>(
    connector: &C,
    mut requests: RequestReceiver<C>,
) -> Result<(), RefError<C::Error>> {
    let (outbound, rx) = mpsc::unbounded_channel();
    let mut inbound = connector
        .connect_ref(RefOutbound { rx })
        .await
        .map_err(|e| RefError::Stream(Arc::new(e)))?;
    let mut pending: HashMap<u64, Responder<C>> = HashMap::new();
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            biased;
            response = poll_fn(|cx| Pin::new(&mut inbound).poll_next(cx)) => match response {
                Some(Ok(response)) => {
                    // An unknown id is ignored (R1 logs it and carries on).
                    if let Some(reply) = pending.remove(&response.request_id()) {
                        let _ = reply.send(Ok(response));
                    }
                }
                // Ending drops every pending responder: their callers see StreamClosed.
                Some(Err(error)) => return Err(RefError::Stream(Arc::new(error))),
                None => return Err(RefError::StreamClosed),
            },
            request = requests.recv() => match request {
                Some((mut request, reply)) => {
                    let id = match request.request_id() {
                        Some(id) => id,
                        None => {
                            while pending.contains_key(&next_id) {
                                next_id = next_id.wrapping_add(1);
                            }
                            request.set_request_id(next_id);
                            next_id
                        }
                    };
                    if pending.contains_key(&id) {
                        let _ = reply.send(Err(RefError::InvalidArgument { id }));
                        continue;
                    }
                    pending.insert(id, reply);
                    if outbound.send(request).is_err() {
                        return Err(RefError::StreamClosed);
                    }
                }
                // Every sender is gone: the entry was removed (reaped or pool dropped).
                None => return Ok(()),
            },
        }
    }
}
