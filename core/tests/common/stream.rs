//! A scripted in-process stream connector for the `StreamPool` tests.
//!
//! Every opened stream is handed to the test as a [`ServerStream`] (manual mode) or answered
//! by an echo task (echo mode). Connects can be made to fail or to wait for a go-ahead, and
//! user code can be made hostile through [`Faults`]: connects and inbound halves that panic
//! (counted, and kept quiet by [`quiet_injected_panics`]), and an echo that stops answering.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use slotpool::stream::{
    Connector, Outbound, Retirement, StreamGuard, StreamPool, StreamPoolBuilder, StreamRequest,
    StreamResponse,
};
use tokio::sync::{mpsc, Semaphore};

use super::{MockTime, ReapByHand};

/// A pool over the scripted connector.
pub type Pool = StreamPool<TestConnector>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    pub id: Option<u64>,
    pub body: u32,
    /// Its `request_id` accessor panics (hostile user code).
    pub panics: bool,
}

impl Req {
    pub fn new(body: u32) -> Self {
        Self {
            id: None,
            body,
            panics: false,
        }
    }

    pub fn with_id(id: u64, body: u32) -> Self {
        Self {
            id: Some(id),
            ..Self::new(body)
        }
    }

    /// A request whose `request_id` panics.
    pub fn panicking(body: u32) -> Self {
        Self {
            panics: true,
            ..Self::new(body)
        }
    }
}

impl StreamRequest for Req {
    fn request_id(&self) -> Option<u64> {
        assert!(!self.panics, "{INJECTED}: request_id");
        self.id
    }
    fn set_request_id(&mut self, id: u64) {
        self.id = Some(id);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resp {
    pub id: u64,
    pub body: u32,
}

impl StreamResponse for Resp {
    fn request_id(&self) -> u64 {
        self.id
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("test transport error: {0}")]
pub struct TestError(pub &'static str);

impl ReapByHand for StreamPoolBuilder<TestConnector> {
    fn reaped_by_hand(self, time: &MockTime) -> Self {
        self.reap_interval(None).clock(time.clock())
    }
}

/// Sends `body` through `guard` and asserts the echo answers with it.
pub async fn assert_echoed(guard: StreamGuard<'_, TestConnector>, body: u32) {
    match guard.send(Req::new(body)).await {
        Ok(response) => assert_eq!(response.body, body),
        Err(error) => panic!("the echo did not answer {body}: {error:?}"),
    }
}

/// Acquires, sends `body` and asserts the echo answers with it.
pub async fn round_trip(pool: &Pool, body: u32) {
    assert_echoed(pool.acquire().await.expect("acquired"), body).await;
}

/// The server's end of one stream.
pub struct ServerStream {
    pub requests: Outbound<Req>,
    pub responses: mpsc::UnboundedSender<Result<Resp, TestError>>,
}

impl ServerStream {
    /// Waits for the next request the pool forwards.
    pub async fn next_request(&mut self) -> Option<Req> {
        std::future::poll_fn(|cx| Pin::new(&mut self.requests).poll_next(cx)).await
    }

    pub fn respond(&self, id: u64, body: u32) {
        let _ = self.responses.send(Ok(Resp { id, body }));
    }

    pub fn fail(&self, why: &'static str) {
        let _ = self.responses.send(Err(TestError(why)));
    }
}

/// What every injected panic says; [`quiet_injected_panics`] keeps these off stderr.
pub const INJECTED: &str = "injected panic";

/// Keeps injected panics (their message contains [`INJECTED`]) from printing through the
/// panic hook; any other panic prints as before. Once per test binary.
pub fn quiet_injected_panics() {
    static QUIET: parking_lot::Once = parking_lot::Once::new();
    QUIET.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if !message.contains(INJECTED) {
                previous(info);
            }
        }));
    });
}

/// Hostile user code and peers, shared by every stream of a [`Script`]. Counters of what to
/// inject count down; rates are per mille, drawn from a seeded generator.
#[derive(Default)]
pub struct Faults {
    /// Connects that panic in the `connect` call itself, before a future exists.
    pub panic_calls: AtomicUsize,
    /// Connects whose future panics when first polled.
    pub panic_connects: AtomicUsize,
    /// Inbound polls that panic when they have a response to yield (the response is lost).
    pub panic_inbound: AtomicUsize,
    /// Inbound halves that panic when dropped.
    pub panic_inbound_drops: AtomicBool,
    /// Per mille: each connect panics (the storm).
    pub connect_rate: AtomicU32,
    /// Per mille: each response the inbound half yields panics instead (the storm).
    pub inbound_rate: AtomicU32,
    /// The echo reads requests and never answers (a hung peer).
    pub mute: AtomicBool,
    /// Panics injected so far (destructors included).
    pub injected: AtomicUsize,
    seed: AtomicU64,
}

impl Faults {
    /// Whether this draw at `per_mille` fires (xorshift over a shared seed).
    fn draw(&self, per_mille: &AtomicU32) -> bool {
        let rate = per_mille.load(Ordering::SeqCst);
        if rate == 0 {
            return false;
        }
        let mut x = self.seed.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::SeqCst) | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % 1000) < u64::from(rate)
    }

    fn take(counter: &AtomicUsize) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    fn inject(&self, what: &str) -> ! {
        self.injected.fetch_add(1, Ordering::SeqCst);
        panic!("{INJECTED}: {what}");
    }

    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::SeqCst)
    }
}

pub struct Inbound {
    rx: mpsc::UnboundedReceiver<Result<Resp, TestError>>,
    faults: Arc<Faults>,
    panic_on_drop: bool,
    retirement: Retirement,
    hung_drops: Arc<AtomicUsize>,
}

impl Stream for Inbound {
    type Item = Result<Resp, TestError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // What is there first, without tokio's cooperative budget (which would end a burst
        // after 128 items): as an inbound half that knows nothing of tokio does, so that the
        // driver's own batch limit is what makes it yield.
        let item = match self.rx.try_recv() {
            Ok(item) => Poll::Ready(Some(item)),
            Err(mpsc::error::TryRecvError::Disconnected) => Poll::Ready(None),
            Err(mpsc::error::TryRecvError::Empty) => self.rx.poll_recv(cx),
        };
        if let Poll::Ready(Some(Ok(_))) = &item {
            let faults = &self.faults;
            if Faults::take(&faults.panic_inbound) || faults.draw(&faults.inbound_rate) {
                faults.inject("inbound poll_next");
            }
        }
        item
    }
}

impl Drop for Inbound {
    fn drop(&mut self) {
        if self.retirement.hung() {
            self.hung_drops.fetch_add(1, Ordering::SeqCst);
        }
        if self.panic_on_drop && !std::thread::panicking() {
            self.faults.inject("inbound drop");
        }
    }
}

#[derive(Clone)]
pub struct Script {
    echo: bool,
    fail_next: Arc<AtomicUsize>,
    /// When set, each connect waits for one permit.
    hold: Option<Arc<Semaphore>>,
    connects: Arc<AtomicUsize>,
    /// Connect futures that exist now: polled once and not yet dropped.
    live_connects: Arc<AtomicUsize>,
    /// Connect futures and inbound halves dropped after the pool retired their stream as hung.
    hung_drops: Arc<AtomicUsize>,
    streams: mpsc::UnboundedSender<ServerStream>,
    faults: Arc<Faults>,
    /// One count per clone of this script alive (the test's, the pool's connector, ...).
    clones: Arc<()>,
}

pub struct TestConnector(pub Script);

impl Script {
    /// Echo mode: every request is answered with the same body.
    pub fn echo() -> (Self, mpsc::UnboundedReceiver<ServerStream>) {
        Self::new(true)
    }

    /// Manual mode: the test answers through the `ServerStream`s it receives.
    pub fn manual() -> (Self, mpsc::UnboundedReceiver<ServerStream>) {
        Self::new(false)
    }

    fn new(echo: bool) -> (Self, mpsc::UnboundedReceiver<ServerStream>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                echo,
                fail_next: Arc::new(AtomicUsize::new(0)),
                hold: None,
                connects: Arc::new(AtomicUsize::new(0)),
                live_connects: Arc::new(AtomicUsize::new(0)),
                hung_drops: Arc::new(AtomicUsize::new(0)),
                streams: tx,
                faults: Arc::new(Faults::default()),
                clones: Arc::new(()),
            },
            rx,
        )
    }

    /// The faults every stream of this script shares.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Connects wait until the returned semaphore gets permits.
    pub fn held(mut self) -> (Self, Arc<Semaphore>) {
        let hold = Arc::new(Semaphore::new(0));
        self.hold = Some(Arc::clone(&hold));
        (self, hold)
    }

    pub fn fail_next_connects(&self, n: usize) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    pub fn connector(&self) -> TestConnector {
        TestConnector(self.clone())
    }

    /// Clones of this script alive: this one, plus one while a pool's connector holds one.
    pub fn clones(&self) -> usize {
        Arc::strong_count(&self.clones)
    }

    /// Connects attempted so far (failed ones included, held ones once they proceed).
    pub fn connects(&self) -> usize {
        self.connects.load(Ordering::SeqCst)
    }

    /// Connect futures that exist now (polled at least once and not dropped): a connect the
    /// pool gave up on is dropped, not left running.
    pub fn live_connects(&self) -> usize {
        self.live_connects.load(Ordering::SeqCst)
    }

    /// Connect futures and inbound halves that, as they were dropped, found their stream
    /// retired as hung ([`Retirement::hung`]).
    pub fn hung_drops(&self) -> usize {
        self.hung_drops.load(Ordering::SeqCst)
    }

    /// A builder over this script with every setting at its default.
    pub fn builder(&self) -> StreamPoolBuilder<TestConnector> {
        StreamPool::builder(self.connector())
    }

    /// A builder for at most `max_streams` streams (`None`: unbounded) of `depth` requests
    /// each, other settings at their defaults.
    pub fn sized(
        &self,
        max_streams: impl Into<Option<usize>>,
        depth: usize,
    ) -> StreamPoolBuilder<TestConnector> {
        let builder = match max_streams.into() {
            Some(max) => self.builder().max_streams(max),
            None => self.builder(),
        };
        builder.max_queue_depth(depth)
    }

    /// The pool [`Script::sized`] describes.
    pub fn pool(&self, max_streams: impl Into<Option<usize>>, depth: usize) -> Pool {
        self.sized(max_streams, depth)
            .build()
            .expect("valid configuration")
    }
}

impl Connector for TestConnector {
    type Request = Req;
    type Response = Resp;
    type Error = TestError;
    type Inbound = Inbound;

    // Not an `async fn`: the call itself can panic before any future exists.
    fn connect(
        &self,
        outbound: Outbound<Req>,
    ) -> impl Future<Output = Result<Inbound, TestError>> + Send {
        let script = self.0.clone();
        if Faults::take(&script.faults.panic_calls) {
            script.faults.inject("connect call");
        }
        let retirement = outbound.retirement();
        async move {
            let _live = LiveConnect::new(&script, retirement.clone());
            if let Some(hold) = &script.hold {
                hold.acquire()
                    .await
                    .map_err(|_| TestError("hold closed"))?
                    .forget();
            }
            script.connects.fetch_add(1, Ordering::SeqCst);
            let faults = &script.faults;
            if Faults::take(&faults.panic_connects) || faults.draw(&faults.connect_rate) {
                faults.inject("connect future");
            }
            let failing = script
                .fail_next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if failing {
                return Err(TestError("connect refused"));
            }
            let (tx, rx) = mpsc::unbounded_channel();
            let mut server = ServerStream {
                requests: outbound,
                responses: tx,
            };
            if script.echo {
                let faults = Arc::clone(&script.faults);
                tokio::spawn(async move {
                    while let Some(req) = server.next_request().await {
                        if !faults.mute.load(Ordering::SeqCst) {
                            server.respond(req.id.unwrap_or(u64::MAX), req.body);
                        }
                    }
                });
            } else {
                let _ = script.streams.send(server);
            }
            Ok(Inbound {
                rx,
                panic_on_drop: faults.panic_inbound_drops.load(Ordering::SeqCst),
                faults: Arc::clone(&script.faults),
                retirement,
                hung_drops: Arc::clone(&script.hung_drops),
            })
        }
    }
}

/// Counts one connect future in [`Script::live_connects`] while it exists, and in
/// [`Script::hung_drops`] if it is dropped after its stream was retired as hung.
struct LiveConnect {
    live: Arc<AtomicUsize>,
    hung_drops: Arc<AtomicUsize>,
    retirement: Retirement,
}

impl LiveConnect {
    fn new(script: &Script, retirement: Retirement) -> Self {
        script.live_connects.fetch_add(1, Ordering::SeqCst);
        LiveConnect {
            live: Arc::clone(&script.live_connects),
            hung_drops: Arc::clone(&script.hung_drops),
            retirement,
        }
    }
}

impl Drop for LiveConnect {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
        if self.retirement.hung() {
            self.hung_drops.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Polls `future` until it resolves, yielding to the runtime in between (bounded by
/// iterations, never by time), so that an outcome the test expects and never comes fails the
/// test with `what` instead of hanging it.
pub async fn outcome<F: Future>(what: &str, mut future: Pin<&mut F>) -> F::Output {
    for _ in 0..10_000 {
        if let Poll::Ready(output) = super::poll_once(future.as_mut()) {
            return output;
        }
        tokio::task::yield_now().await;
    }
    panic!("{what}");
}

/// On a manual-mode pool: acquires, sends `body`, answers it on the stream the pool opens for
/// it (the next one `streams` hands out) and checks the answer. Returns that stream (to end
/// it, or to keep it open) and the slot the request went to.
pub async fn answer_on_new_stream(
    pool: &Pool,
    streams: &mut mpsc::UnboundedReceiver<ServerStream>,
    body: u32,
) -> (ServerStream, Option<usize>) {
    let guard = pool.acquire().await.expect("acquired");
    let index = guard.stream_index();
    let mut send = std::pin::pin!(guard.send(Req::new(body)));
    assert!(super::poll_once(send.as_mut()).is_pending());
    let mut server = streams.recv().await.expect("a new stream");
    let request = server.next_request().await.expect("the request");
    server.respond(request.id.expect("an id"), body);
    assert_eq!(send.await.expect("answered").body, body);
    (server, index)
}
