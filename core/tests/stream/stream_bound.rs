//! `max_streams` bounds the streams that exist: a retired stream counts against it until its
//! driver has let go of what the connector gave it (the connect future while opening, the
//! inbound half once open). Each test holds one stream's close open (the transport's
//! destructor blocks the driver's thread until the test lets it go), asks the pool for a
//! stream meanwhile (a `try_acquire` and an acquire that waits), and checks that no stream was
//! started beside the one still closing; then lets the close finish and checks that the room
//! came back (the waiting acquire opens a new stream and is answered). Every way a stream is
//! retired is covered: a peer that fails the stream with a request in flight, a peer that
//! ends an idle stream, a stall, an open timeout, idle reaping, and the pool's drop.
//!
//! What keeps the bound on a stream the driver retires: `Driver::run` drops the inbound half
//! (and `Driver::open` the connect future) before `Driver::finish` drains the slot and
//! releases the units it holds, so the slot empties only once the halves are gone. Idle
//! reaping is the one retirement the driver does not start: the reaper's pass keeps one unit
//! on the retired (Draining) slot and hands it to the driver, which releases it after the
//! halves are gone (`SlotTable::reap_idle_holding`), so no stream opens beside a reaped one
//! still closing. (The pass used to empty the slot itself and only then ask the driver to
//! stop; `a_reaped_stream_counts_until_its_halves_are_dropped` found it.)
//!
//! Real threads (a held close blocks one of the runtime's two workers; the test's own thread
//! is not one of them), the pool's clock mocked and driven by hand; the drivers' own timers
//! are an hour away on tokio's clock, so what fires a deadline here is the reaper's pass on
//! the mock clock. Nothing is timed: every wait is on a notification (a connect announces
//! its stream, the held destructor announces itself).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use parking_lot::{Condvar, Mutex};
use slotpool::stream::{
    Correlation, Outbound, OwnedStreamGuard, RequestError, StreamConnector, StreamPool,
};
use slotpool::{AcquireError, Reach, TryAcquireError};
use tokio::sync::mpsc;

use crate::common::{poll_once, Hold, MockTime};

/// The hung-peer deadlines: an hour, so that the drivers' timers on tokio's clock never fire
/// within a test, and only the reaper's pass on the mock clock does.
const HOUR: Duration = Duration::from_secs(3600);
const IDLE: Duration = Duration::from_secs(10);

/// Every transport the connector made, alive now and at most, and the knobs of the fake peer.
#[derive(Default)]
struct Books {
    /// Transports that exist now: made when a connect starts, gone when the driver has
    /// dropped what holds it (the connect future or the inbound half) and its destructor is
    /// done.
    live: AtomicUsize,
    /// The most `live` ever was (it only grows at a connect, where it is recorded).
    peak: AtomicUsize,
    /// Transports made (one per connect).
    made: AtomicUsize,
    /// Destructors that have finished.
    closed: Count,
    /// While set, a transport's destructor blocks in `close` until the test opens it.
    hold_close: AtomicBool,
    close: Hold,
    /// The peer reads requests and does not answer them.
    mute: AtomicBool,
    /// Connects never finish.
    hang_connect: AtomicBool,
}

impl Books {
    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// A count that can be waited for (parking_lot's lock and condition variable, so
/// ThreadSanitizer sees the hand-over: see `crate::common::Hold`).
#[derive(Default)]
struct Count {
    n: Mutex<usize>,
    moved: Condvar,
}

impl Count {
    fn bump(&self) {
        *self.n.lock() += 1;
        self.moved.notify_all();
    }

    fn wait_for(&self, n: usize) {
        let mut count = self.n.lock();
        while *count < n {
            self.moved.wait(&mut count);
        }
    }
}

/// One stream's transport: counted live from its connect until its destructor is done, which
/// the test can hold open.
struct Transport(Arc<Books>);

impl Transport {
    fn new(books: &Arc<Books>) -> Self {
        let live = books.live.fetch_add(1, Ordering::SeqCst) + 1;
        books.peak.fetch_max(live, Ordering::SeqCst);
        books.made.fetch_add(1, Ordering::SeqCst);
        Transport(Arc::clone(books))
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        let books = &self.0;
        if books.hold_close.load(Ordering::SeqCst) {
            books.close.block();
        }
        books.live.fetch_sub(1, Ordering::SeqCst);
        books.closed.bump();
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the peer broke the stream")]
struct Broken;

/// What the test tells a stream's peer.
enum Ctl {
    Fail,
}

/// The test's end of one stream: dropping it ends the stream (the peer hung up).
struct Peer {
    ctl: mpsc::UnboundedSender<Ctl>,
    /// Requests the peer read while muted.
    swallowed: mpsc::UnboundedReceiver<u32>,
}

impl Peer {
    fn fail(&self) {
        self.ctl.send(Ctl::Fail).unwrap();
    }
}

/// The inbound half: an in-process peer that answers each request, in order, with itself
/// (unless muted), and fails or ends when the test says. It holds the outbound half and the
/// stream's transport, so the driver's drop of it is the stream's close.
struct Inbound {
    outbound: Outbound<u32>,
    ctl: mpsc::UnboundedReceiver<Ctl>,
    swallowed: mpsc::UnboundedSender<u32>,
    books: Arc<Books>,
    _transport: Transport,
}

impl Stream for Inbound {
    type Item = Result<u32, Broken>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.ctl.poll_recv(cx) {
            Poll::Ready(Some(Ctl::Fail)) => return Poll::Ready(Some(Err(Broken))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        loop {
            match Pin::new(&mut self.outbound).poll_next(cx) {
                Poll::Ready(Some(request)) if self.books.mute.load(Ordering::SeqCst) => {
                    let _ = self.swallowed.send(request);
                }
                Poll::Ready(Some(request)) => return Poll::Ready(Some(Ok(request))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Opens streams over [`Inbound`], announcing each to the test once its transport exists.
struct Counted {
    books: Arc<Books>,
    peers: mpsc::UnboundedSender<Peer>,
}

impl StreamConnector for Counted {
    type Request = u32;
    type Response = u32;
    type Error = Broken;
    type Inbound = Inbound;
    const CORRELATION: Correlation = Correlation::InOrder;

    async fn connect(&self, outbound: Outbound<u32>) -> Result<Inbound, Broken> {
        let transport = Transport::new(&self.books);
        let (ctl_tx, ctl) = mpsc::unbounded_channel();
        let (swallowed, swallowed_rx) = mpsc::unbounded_channel();
        let _ = self.peers.send(Peer {
            ctl: ctl_tx,
            swallowed: swallowed_rx,
        });
        if self.books.hang_connect.load(Ordering::SeqCst) {
            // The transport goes with this future when the pool gives up on it.
            std::future::pending::<Infallible>().await;
        }
        Ok(Inbound {
            outbound,
            ctl,
            swallowed,
            books: Arc::clone(&self.books),
            _transport: transport,
        })
    }
}

type Pool = StreamPool<Counted>;

/// Two workers: a held close blocks one, the other runs the rest. The test's thread, which
/// waits for the held close, is not a worker.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

struct Fixture {
    pool: Arc<Pool>,
    books: Arc<Books>,
    peers: mpsc::UnboundedReceiver<Peer>,
    /// Streams the test keeps open (a dropped `Peer` ends its stream).
    kept: Vec<Peer>,
    time: MockTime,
    max_streams: usize,
}

/// Opens the hold when dropped, so that a failing test does not leave a driver blocked (and
/// the runtime's drop waiting for it).
struct OpenOnDrop(Arc<Books>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.close.open();
    }
}

impl Fixture {
    /// A pool of at most `max_streams` streams of `depth` requests, reaped by hand on a mock
    /// clock, built inside the current runtime; and what opens the hold when the test ends.
    fn new(max_streams: usize, depth: usize) -> (Self, OpenOnDrop) {
        let books = Arc::new(Books::default());
        let (tx, peers) = mpsc::unbounded_channel();
        let time = MockTime::new();
        let pool = StreamPool::builder(Counted {
            books: Arc::clone(&books),
            peers: tx,
        })
        .max_streams(max_streams)
        .max_queue_depth(depth)
        .idle_timeout(IDLE)
        .open_timeout(Some(HOUR))
        .stall_timeout(Some(HOUR))
        .reap_interval(None)
        .clock(time.clock())
        .build()
        .unwrap();
        let pool = Arc::new(pool);
        let open = OpenOnDrop(Arc::clone(&books));
        (
            Fixture {
                pool,
                books,
                peers,
                kept: Vec::new(),
                time,
                max_streams,
            },
            open,
        )
    }

    /// The next stream a connect announced (its transport is counted by then).
    async fn next_peer(&mut self) -> Peer {
        self.peers
            .recv()
            .await
            .expect("a connect announced its stream")
    }

    /// Acquires, sends `body` and checks the answer, on a stream the pool has or opens (kept
    /// open if new).
    async fn round_trip(&mut self, body: u32) {
        let guard = self.pool.acquire_owned().await.unwrap();
        self.answered(guard, body).await;
    }

    /// Sends `body` through `guard` and checks that the peer answered it; keeps open the
    /// streams announced by then (the one it went on, if it opened it).
    async fn answered(&mut self, guard: OwnedStreamGuard<Counted>, body: u32) {
        match guard.send(body).await {
            Ok(answer) => assert_eq!(answer, body),
            Err(error) => panic!("{body} was not answered: {error:?}"),
        }
        while let Ok(peer) = self.peers.try_recv() {
            self.kept.push(peer);
        }
    }

    /// Sends `body` on a stream the test then fails: spawned, so that it stays in flight.
    /// Returns the send, and the stream's peer once it has read the request.
    async fn in_flight(
        &mut self,
        body: u32,
    ) -> (
        tokio::task::JoinHandle<Result<u32, RequestError<Broken>>>,
        Peer,
    ) {
        self.books.mute.store(true, Ordering::SeqCst);
        let guard = self.pool.acquire_owned().await.unwrap();
        let sent = tokio::spawn(guard.send(body));
        let mut peer = self.next_peer().await;
        assert_eq!(peer.swallowed.recv().await, Some(body), "on the wire");
        (sent, peer)
    }

    /// Once a retired stream's close is held: asks for a stream (a try, then an acquire that
    /// waits) and checks that the pool started none beside the closing one, and that no more
    /// than `max_streams` transports ever existed. Returns what the try got (it may join the
    /// closing stream if that still shows room: nothing is opened for it) and the waiting
    /// acquire, to finish after the close.
    async fn demand_while_closing(&mut self) -> (Option<OwnedStreamGuard<Counted>>, Waiter) {
        self.books.close.wait_entered(1);
        let live = self.books.live();
        let spin_ups = self.pool.stats().spin_ups;
        let tried = self.pool.try_acquire_owned();
        let pool = Arc::clone(&self.pool);
        let mut waiter: Waiter = Box::pin(async move { pool.acquire_owned().await });
        assert!(
            poll_once(Pin::new(&mut waiter)).is_pending(),
            "an acquire found room beside the closing stream"
        );
        let started = self.pool.stats().spin_ups - spin_ups;
        // A stream the pool started counts itself live when its connect runs: wait for it, so
        // that an overshoot shows in the books rather than racing them.
        for _ in 0..started {
            let peer = self.next_peer().await;
            self.kept.push(peer);
        }
        let tried = match tried {
            Ok(guard) => Some(guard),
            Err(TryAcquireError::NoCapacity) => None,
            Err(other) => panic!("unexpected try_acquire error: {other}"),
        };
        assert!(
            self.books.peak() <= self.max_streams,
            "max_streams is {} but {} transports existed at once ({} started while one was \
             closing, the try got {:?})",
            self.max_streams,
            self.books.peak(),
            started,
            tried.as_ref().map(|g| g.stream_index()),
        );
        assert_eq!(started, 0, "a stream started beside one still closing");
        assert_eq!(self.books.live(), live, "the closing stream still counts");
        (tried, waiter)
    }

    /// Lets the held close finish; then the waiting acquire gets room and a new stream opens
    /// and answers, and the bound held throughout.
    async fn release_and_reopen(&mut self, waiter: Waiter, body: u32) {
        self.books.mute.store(false, Ordering::SeqCst);
        self.books.close.open();
        let guard = waiter.await.expect("room after the close");
        self.answered(guard, body).await;
        assert!(
            self.books.peak() <= self.max_streams,
            "at most {} transports at once, saw {}",
            self.max_streams,
            self.books.peak()
        );
    }
}

type Waiter = Pin<
    Box<dyn std::future::Future<Output = Result<OwnedStreamGuard<Counted>, AcquireError>> + Send>,
>;

/// The error a send ended with, once its stream was retired.
async fn failed(
    sent: tokio::task::JoinHandle<Result<u32, RequestError<Broken>>>,
) -> RequestError<Broken> {
    match sent.await.unwrap() {
        Ok(answer) => panic!("answered {answer} on a retired stream"),
        Err(error) => error,
    }
}

/// A peer that breaks a stream with a request in flight: the stream is full while its
/// inbound half is dropped, and its room comes back only after that drop.
#[test]
fn a_failed_stream_counts_until_its_halves_are_dropped() {
    runtime().block_on(async {
        let (mut f, _open) = Fixture::new(1, 1);
        let (sent, peer) = f.in_flight(1).await;
        f.books.hold_close.store(true, Ordering::SeqCst);
        peer.fail();
        let (tried, waiter) = f.demand_while_closing().await;
        assert!(tried.is_none(), "the failing stream is full");
        f.release_and_reopen(waiter, 2).await;
        let error = failed(sent).await;
        assert!(
            matches!(
                error,
                RequestError::StreamEnded {
                    reach: Reach::MaybeApplied,
                    source: Some(_)
                }
            ),
            "{error:?}"
        );
        let stats = f.pool.stats();
        assert_eq!((stats.spin_ups, stats.stream_failures), (2, 1));
    });
}

/// A peer that ends an idle stream: the slot has room while the driver drops the stream's
/// halves, so a try may join the ending stream (and fail, not sent), but no stream opens
/// beside it until the halves are gone.
#[test]
fn a_stream_the_peer_ended_counts_until_its_halves_are_dropped() {
    runtime().block_on(async {
        let (mut f, _open) = Fixture::new(1, 1);
        f.round_trip(1).await;
        let peer = f.kept.pop().unwrap();
        f.books.hold_close.store(true, Ordering::SeqCst);
        drop(peer);
        let (tried, waiter) = f.demand_while_closing().await;
        f.books.close.open();
        if let Some(tried) = tried {
            let error = tried.send(9).await.unwrap_err();
            assert_eq!(error.reach(), Reach::NotSent, "{error:?}");
        }
        f.release_and_reopen(waiter, 2).await;
        let stats = f.pool.stats();
        assert_eq!((stats.spin_ups, stats.stream_failures), (2, 1));
    });
}

/// A stream declared hung by the stall check (the reaper's pass on the mock clock): full
/// while its halves are dropped.
#[test]
fn a_stalled_stream_counts_until_its_halves_are_dropped() {
    runtime().block_on(async {
        let (mut f, _open) = Fixture::new(1, 1);
        let (sent, _peer) = f.in_flight(1).await;
        f.pool.reap(f.time.now());
        f.time.advance(HOUR);
        f.books.hold_close.store(true, Ordering::SeqCst);
        f.pool.reap(f.time.now());
        let (tried, waiter) = f.demand_while_closing().await;
        assert!(tried.is_none(), "the stalled stream is full");
        f.release_and_reopen(waiter, 2).await;
        let error = failed(sent).await;
        assert!(
            matches!(
                error,
                RequestError::Stalled {
                    reach: Reach::MaybeApplied,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(f.pool.stats().stalls, 1);
    });
}

/// A connect past its `open_timeout` (the reaper's pass on the mock clock): the transport the
/// connect future holds counts until that future is dropped. The caller that started the
/// stream gave up on it, so the slot shows room while the connect is dropped: a try joins the
/// opening stream (and fails with it, not sent), and nothing opens beside it.
#[test]
fn a_stream_that_timed_out_opening_counts_until_its_connect_is_dropped() {
    runtime().block_on(async {
        let (mut f, _open) = Fixture::new(1, 1);
        f.books.hang_connect.store(true, Ordering::SeqCst);
        let starter = f.pool.acquire_owned().await.unwrap();
        let _connecting = f.next_peer().await;
        drop(starter);
        f.time.advance(HOUR);
        f.books.hold_close.store(true, Ordering::SeqCst);
        f.pool.reap(f.time.now());
        let (tried, waiter) = f.demand_while_closing().await;
        f.books.hang_connect.store(false, Ordering::SeqCst);
        f.books.close.open();
        if let Some(tried) = tried {
            let error = tried.send(9).await.unwrap_err();
            assert!(
                matches!(error, RequestError::OpenTimeout { .. }),
                "{error:?}"
            );
        }
        f.release_and_reopen(waiter, 2).await;
        let stats = f.pool.stats();
        assert_eq!((stats.spin_ups, stats.open_timeouts), (2, 1));
    });
}

/// An idle stream the reaper retires counts until its driver has dropped its halves. (It did
/// not: the pass took the slot from Ready straight to Empty and only then asked the driver to
/// stop, so a `try_acquire` claimed the slot and a second stream connected beside the one
/// still closing, 2 transports with `max_streams(1)`. The pass now keeps one unit on the
/// Draining slot, `SlotTable::reap_idle_holding`, and the driver releases it after the
/// halves.)
#[test]
fn a_reaped_stream_counts_until_its_halves_are_dropped() {
    runtime().block_on(async {
        let (mut f, _open) = Fixture::new(1, 1);
        f.round_trip(1).await;
        assert_eq!(
            f.pool.reap(f.time.now()),
            0,
            "the first pass notes the idle stream"
        );
        f.time.advance(IDLE);
        f.books.hold_close.store(true, Ordering::SeqCst);
        assert_eq!(f.pool.reap(f.time.now()), 1);
        let (tried, waiter) = f.demand_while_closing().await;
        assert!(tried.is_none(), "the reaped stream still counts");
        f.release_and_reopen(waiter, 2).await;
        assert_eq!(f.pool.stats().reaps, 1);
    });
}

/// The pool's drop stops every driver: each lets go of its stream's halves (held here), and
/// nothing is opened meanwhile; once let go, no transport is left.
#[test]
fn a_dropped_pool_lets_go_of_every_stream() {
    runtime().block_on(async {
        let (mut f, _open) = Fixture::new(2, 1);
        let a = f.pool.acquire_owned().await.unwrap();
        let b = f.pool.acquire_owned().await.unwrap();
        assert_ne!(a.stream_index(), b.stream_index());
        f.answered(a, 1).await;
        f.answered(b, 2).await;
        assert_eq!(f.books.live(), 2);
        f.books.hold_close.store(true, Ordering::SeqCst);
        let Fixture {
            pool, books, kept, ..
        } = f;
        drop(pool);
        books.close.wait_entered(2);
        assert_eq!(books.live(), 2, "both closing streams count");
        assert_eq!(books.made.load(Ordering::SeqCst), 2, "nothing opened");
        books.close.open();
        books.closed.wait_for(2);
        assert_eq!(books.live(), 0);
        assert_eq!(books.peak(), 2);
        drop(kept);
    });
}
