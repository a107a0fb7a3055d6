//! A scripted in-process stream connector for the `StreamPool` tests.
//!
//! Every opened stream is handed to the test as a [`ServerStream`] (manual mode) or answered
//! by an echo task (echo mode). Connects can be made to fail or to wait for a go-ahead.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use slotpool::stream::{
    Connector, Outbound, StreamGuard, StreamPool, StreamPoolBuilder, StreamRequest, StreamResponse,
};
use tokio::sync::{mpsc, Semaphore};

use super::{MockTime, ReapByHand};

/// A pool over the scripted connector.
pub type Pool = StreamPool<TestConnector>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    pub id: Option<u64>,
    pub body: u32,
}

impl Req {
    pub fn new(body: u32) -> Self {
        Self { id: None, body }
    }

    pub fn with_id(id: u64, body: u32) -> Self {
        Self { id: Some(id), body }
    }
}

impl StreamRequest for Req {
    fn request_id(&self) -> Option<u64> {
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

pub struct Inbound(mpsc::UnboundedReceiver<Result<Resp, TestError>>);

impl Stream for Inbound {
    type Item = Result<Resp, TestError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[derive(Clone)]
pub struct Script {
    echo: bool,
    fail_next: Arc<AtomicUsize>,
    /// When set, each connect waits for one permit.
    hold: Option<Arc<Semaphore>>,
    connects: Arc<AtomicUsize>,
    streams: mpsc::UnboundedSender<ServerStream>,
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
                streams: tx,
            },
            rx,
        )
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

    /// Connects attempted so far (failed ones included, held ones once they proceed).
    pub fn connects(&self) -> usize {
        self.connects.load(Ordering::SeqCst)
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

    async fn connect(&self, outbound: Outbound<Req>) -> Result<Inbound, TestError> {
        let script = &self.0;
        if let Some(hold) = &script.hold {
            hold.acquire()
                .await
                .map_err(|_| TestError("hold closed"))?
                .forget();
        }
        script.connects.fetch_add(1, Ordering::SeqCst);
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
            tokio::spawn(async move {
                while let Some(req) = server.next_request().await {
                    server.respond(req.id.unwrap_or(u64::MAX), req.body);
                }
            });
        } else {
            let _ = script.streams.send(server);
        }
        Ok(Inbound(rx))
    }
}
