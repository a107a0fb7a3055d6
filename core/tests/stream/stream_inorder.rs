//! StreamPool over a peer that answers in order and carries no request id
//! ([`Correlation::InOrder`]): the same guarantees as by id (exact depth under cancellation,
//! typed failures that say whether a request was sent), through messages that implement no
//! trait of slotpool's. No test sleeps or times anything: callers' futures are polled by hand
//! and `settle` yields until the driver tasks have caught up.

use std::future::Future;
use std::ops::RangeInclusive;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::common::{join_all, settle, settle_until, MockTime, ReapByHand};
use futures_core::Stream;
use slotpool::stream::{
    Correlation, Outbound, RequestError, StreamConnector, StreamPool, StreamPoolBuilder,
};
use slotpool::{Reach, TryAcquireError};
use tokio::sync::mpsc;

/// A request: no id, and nothing slotpool could stamp one on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ask(u32);

/// A response: says nothing of the request it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer(u32);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("peer error: {0}")]
struct PeerError(&'static str);

/// The peer's end of one stream, for a test to answer by hand.
struct PeerStream {
    asks: Outbound<Ask>,
    answers: mpsc::UnboundedSender<Result<Answer, PeerError>>,
}

impl PeerStream {
    /// The next request the pool sent (yielding to the driver until there is one, bounded by
    /// iterations).
    async fn next_ask(&mut self) -> Ask {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for _ in 0..10_000 {
            match Pin::new(&mut self.asks).poll_next(&mut cx) {
                Poll::Ready(Some(ask)) => return ask,
                Poll::Ready(None) => panic!("the pool closed the outbound half"),
                Poll::Pending => tokio::task::yield_now().await,
            }
        }
        panic!("the pool sent nothing more");
    }

    async fn next_ask_or_end(&mut self) -> Option<Ask> {
        std::future::poll_fn(|cx| Pin::new(&mut self.asks).poll_next(cx)).await
    }

    fn answer(&self, body: u32) {
        let _ = self.answers.send(Ok(Answer(body)));
    }

    fn fail(&self, why: &'static str) {
        let _ = self.answers.send(Err(PeerError(why)));
    }
}

struct Inbound(mpsc::UnboundedReceiver<Result<Answer, PeerError>>);

impl Stream for Inbound {
    type Item = Result<Answer, PeerError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// An in-order peer. In echo mode a task answers every request with its body, in order: it
/// takes every request that is ready, then answers them together (so requests pile up on the
/// wire at depth); in manual mode each stream's end goes to the test.
#[derive(Clone)]
struct Peer {
    echo: bool,
    streams: mpsc::UnboundedSender<PeerStream>,
    /// The echo reads requests and never answers.
    mute: Arc<AtomicBool>,
}

impl Peer {
    fn echo() -> Self {
        let (streams, _) = mpsc::unbounded_channel();
        Self {
            echo: true,
            streams,
            mute: Arc::default(),
        }
    }

    fn manual() -> (Self, mpsc::UnboundedReceiver<PeerStream>) {
        let (streams, rx) = mpsc::unbounded_channel();
        let peer = Self {
            echo: false,
            streams,
            mute: Arc::default(),
        };
        (peer, rx)
    }

    fn builder(&self, max_streams: usize, depth: usize) -> StreamPoolBuilder<Peer> {
        StreamPool::builder(self.clone())
            .max_streams(max_streams)
            .max_queue_depth(depth)
    }

    fn pool(&self, max_streams: usize, depth: usize) -> StreamPool<Peer> {
        self.builder(max_streams, depth)
            .build()
            .expect("valid configuration")
    }
}

impl ReapByHand for StreamPoolBuilder<Peer> {
    fn reaped_by_hand(self, time: &MockTime) -> Self {
        self.reap_interval(None).clock(time.clock())
    }
}

impl StreamConnector for Peer {
    type Request = Ask;
    type Response = Answer;
    type Error = PeerError;
    type Inbound = Inbound;

    const CORRELATION: Correlation = Correlation::InOrder;

    async fn connect(&self, asks: Outbound<Ask>) -> Result<Inbound, PeerError> {
        let (answers, rx) = mpsc::unbounded_channel();
        let mut stream = PeerStream { asks, answers };
        if !self.echo {
            let _ = self.streams.send(stream);
            return Ok(Inbound(rx));
        }
        let mute = Arc::clone(&self.mute);
        tokio::spawn(async move {
            loop {
                let mut asked = vec![stream.next_ask_or_end().await];
                // Whatever else is ready now: taken together, answered together.
                while let Some(more) = std::future::poll_fn(|cx| {
                    Poll::Ready(match Pin::new(&mut stream.asks).poll_next(cx) {
                        Poll::Ready(ask) => Some(ask),
                        Poll::Pending => None,
                    })
                })
                .await
                {
                    asked.push(more);
                }
                for ask in asked {
                    match ask {
                        Some(Ask(body)) if !mute.load(Ordering::SeqCst) => stream.answer(body),
                        Some(_) => {}
                        None => return,
                    }
                }
                tokio::task::yield_now().await;
            }
        });
        Ok(Inbound(rx))
    }
}

type Pool = StreamPool<Peer>;
type Sent = Result<Answer, RequestError<PeerError>>;
/// A send in progress (polled by hand with [`outcome`]).
type Sending<'p> = Pin<Box<dyn Future<Output = Sent> + 'p>>;

/// A pool of one stream at `depth` over a peer the test answers by hand.
fn manual_pool(depth: usize) -> (Pool, mpsc::UnboundedReceiver<PeerStream>) {
    let (peer, streams) = Peer::manual();
    (peer.pool(1, depth), streams)
}

/// Sends `body` on a fresh guard without awaiting the response: the returned future has
/// been polled once, so the request is queued for the driver (and sent once it runs).
async fn queue(pool: &Pool, body: u32) -> Sending<'_> {
    let guard = pool.acquire().await.expect("room on the stream");
    let mut sent: Sending<'_> = Box::pin(guard.send(Ask(body)));
    assert!(poll(&mut sent).is_pending());
    sent
}

/// Polls a send once, with a waker that does nothing.
fn poll(sent: &mut Sending<'_>) -> Poll<Sent> {
    sent.as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// Queues a request for each of `bodies` on a one-stream pool, then takes the stream's peer
/// end and reads them off the wire, asserting they went out in the order queued.
async fn on_the_wire<'p>(
    pool: &'p Pool,
    streams: &mut mpsc::UnboundedReceiver<PeerStream>,
    bodies: RangeInclusive<u32>,
) -> (Vec<Sending<'p>>, PeerStream) {
    let mut sent = Vec::new();
    for body in bodies.clone() {
        sent.push(queue(pool, body).await);
    }
    let mut stream = streams.recv().await.expect("the stream opened");
    for body in bodies {
        assert_eq!(
            stream.next_ask().await,
            Ask(body),
            "sent in the order queued"
        );
    }
    (sent, stream)
}

/// The outcome of a queued send, yielding to the driver until it is there (bounded by
/// iterations, never by time: a send that never resolves fails the test instead of hanging).
async fn outcome(mut sent: Sending<'_>) -> Sent {
    for _ in 0..10_000 {
        if let Poll::Ready(sent) = poll(&mut sent) {
            return sent;
        }
        tokio::task::yield_now().await;
    }
    panic!("the send never resolved");
}

/// The answer a send got; anything else fails the test.
async fn answered(sent: Sending<'_>) -> Answer {
    match outcome(sent).await {
        Ok(answer) => answer,
        Err(error) => panic!("expected an answer, got {error:?}"),
    }
}

/// The `reach` of a send that failed with `StreamEnded`; anything else fails the test.
async fn stream_ended(sent: Sending<'_>) -> Reach {
    match outcome(sent).await {
        Err(error @ RequestError::StreamEnded { .. }) => error.reach(),
        other => panic!("expected the stream to end, got {other:?}"),
    }
}

fn in_flight(pool: &Pool) -> u32 {
    pool.stats().table.in_flight as u32
}

/// The pool's counts of what became of requests and responses: (completed, failed, cancelled,
/// late responses, unknown responses, stream failures).
fn tally(pool: &Pool) -> (u64, u64, u64, u64, u64, u64) {
    let s = pool.stats();
    let (done, failed, cancelled) = (s.completed, s.failed, s.cancelled);
    (
        done,
        failed,
        cancelled,
        s.late_responses,
        s.unknown_responses,
        s.stream_failures,
    )
}

/// Many callers at depth 4 on 2 streams, concurrently, the peer answering whatever it holds in
/// order: every caller gets the answer to its own request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_order_round_trips_at_depth_reach_their_callers() {
    let pool = Arc::new(Peer::echo().pool(2, 4));
    let tasks = (0..8u32)
        .map(|task| {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                for round in 0..50u32 {
                    let body = task * 1000 + round;
                    let guard = pool.acquire().await.expect("acquired");
                    let answer = guard.send(Ask(body)).await.expect("answered");
                    assert_eq!(answer, Answer(body), "a caller got another's response");
                }
            })
        })
        .collect();
    join_all(tasks).await;
    assert_eq!(tally(&pool), (400, 0, 0, 0, 0, 0));
    // How many streams open depends on how the tasks overlap (run one after another, they
    // share one stream); never more than the bound.
    let spin_ups = pool.stats().spin_ups;
    assert!(
        (1..=2).contains(&spin_ups),
        "8 callers on 2 streams of depth 4 opened {spin_ups}"
    );
    assert_eq!(in_flight(&pool), 0);
}

/// Four requests on the wire at once on one stream, answered in order after the peer holds all
/// four: each caller gets its own answer.
#[tokio::test(flavor = "current_thread")]
async fn four_requests_on_the_wire_are_answered_to_their_callers_in_order() {
    let (pool, mut streams) = manual_pool(4);
    let (sent, stream) = on_the_wire(&pool, &mut streams, 1..=4).await;
    assert_eq!(in_flight(&pool), 4);
    for body in 1..=4 {
        stream.answer(body * 10);
    }
    for (body, sent) in (1..=4).zip(sent) {
        assert_eq!(answered(sent).await, Answer(body * 10));
    }
    assert_eq!(tally(&pool), (4, 0, 0, 0, 0, 0));
    assert_eq!((pool.stats().spin_ups, in_flight(&pool)), (1, 0));
}

/// Three requests on the wire, the middle one cancelled, then a fourth sent behind them: the
/// cancelled one's response is still consumed in its turn and discarded (the third caller gets
/// the third answer, not the second), and its unit of depth stays taken until then, even as
/// more requests go out.
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_request_keeps_its_place_and_its_depth_until_its_response() {
    let (pool, mut streams) = manual_pool(4);
    let (mut sent, mut stream) = on_the_wire(&pool, &mut streams, 1..=3).await;
    let c = sent.pop().expect("three sent");
    drop(sent.pop());
    let a = sent.pop().expect("three sent");
    let d = queue(&pool, 4).await;
    assert_eq!(stream.next_ask().await, Ask(4));
    assert_eq!(
        in_flight(&pool),
        4,
        "the cancelled request still holds its depth"
    );
    assert_eq!(
        pool.try_acquire().unwrap_err(),
        TryAcquireError::NoCapacity,
        "no room until its response arrives"
    );
    stream.answer(10);
    assert_eq!(answered(a).await, Answer(10));
    assert_eq!(in_flight(&pool), 3);
    stream.answer(20);
    settle_until("the cancelled request's response is consumed", || {
        pool.stats().late_responses == 1
    })
    .await;
    assert_eq!(
        in_flight(&pool),
        2,
        "its depth comes back with its response"
    );
    stream.answer(30);
    assert_eq!(answered(c).await, Answer(30), "not the cancelled one's");
    stream.answer(40);
    assert_eq!(answered(d).await, Answer(40));
    assert_eq!(tally(&pool), (3, 0, 1, 1, 0, 0));
    assert_eq!(in_flight(&pool), 0);
}

/// A request cancelled before the driver sent it is not sent at all, so it takes no place in
/// the queue: the next answer goes to the next request that was sent.
#[tokio::test(flavor = "current_thread")]
async fn a_request_cancelled_before_it_is_sent_takes_no_place() {
    let (pool, mut streams) = manual_pool(3);
    let (mut sent, mut stream) = on_the_wire(&pool, &mut streams, 1..=1).await;
    // Queued for the driver, then dropped before the driver ran.
    drop(queue(&pool, 2).await);
    let c = queue(&pool, 3).await;
    assert_eq!(
        stream.next_ask().await,
        Ask(3),
        "the cancelled one was never sent"
    );
    stream.answer(10);
    stream.answer(30);
    assert_eq!(answered(sent.remove(0)).await, Answer(10));
    assert_eq!(answered(c).await, Answer(30));
    // Cancelled (its send had started), and no response was ever late for it.
    assert_eq!(tally(&pool), (2, 0, 1, 0, 0, 0));
    assert_eq!(in_flight(&pool), 0);
}

/// A peer that sends one response too many: the surplus, arriving with nothing outstanding,
/// proves the peer out of step. It is discarded and counted, the stream is closed as failed
/// (the request queued behind it was not sent: `NotSent`), and the next request opens a fresh
/// stream that answers it correctly.
#[tokio::test(flavor = "current_thread")]
async fn one_response_too_many_closes_the_stream() {
    let (pool, mut streams) = manual_pool(2);
    let (mut sent, stream) = on_the_wire(&pool, &mut streams, 1..=1).await;
    stream.answer(10);
    assert_eq!(answered(sent.remove(0)).await, Answer(10));
    // The surplus and the next request reach the driver together: the response is routed
    // first, finds nothing outstanding, and the stream ends before the request is sent.
    stream.answer(99);
    let b = queue(&pool, 2).await;
    assert_eq!(stream_ended(b).await, Reach::NotSent);
    settle(|| pool.stats().table.empty == 1).await;
    assert_eq!(tally(&pool), (1, 1, 0, 0, 1, 1));
    let (mut sent, fresh) = on_the_wire(&pool, &mut streams, 3..=3).await;
    fresh.answer(30);
    assert_eq!(answered(sent.remove(0)).await, Answer(30));
    assert_eq!(pool.stats().spin_ups, 2);
}

/// The surplus arriving when the stream has gone quiet (nothing outstanding, nothing queued):
/// still out of step, still closed, and the next caller never sees the stray response.
#[tokio::test(flavor = "current_thread")]
async fn a_stray_response_on_a_quiet_stream_never_reaches_the_next_caller() {
    let (pool, mut streams) = manual_pool(2);
    let (mut sent, stream) = on_the_wire(&pool, &mut streams, 1..=1).await;
    stream.answer(10);
    stream.answer(11);
    assert_eq!(answered(sent.remove(0)).await, Answer(10));
    settle_until("the out-of-step stream is closed", || {
        pool.stats().stream_failures == 1
    })
    .await;
    settle(|| pool.stats().table.empty == 1).await;
    let (mut sent, fresh) = on_the_wire(&pool, &mut streams, 2..=2).await;
    fresh.answer(20);
    assert_eq!(
        answered(sent.remove(0)).await,
        Answer(20),
        "not the stray 11"
    );
    assert_eq!(tally(&pool), (2, 0, 0, 0, 1, 1));
}

/// The peer ends the stream after answering the first of three requests on the wire, with a
/// fourth still queued: the first is answered, the other two sent ones fail as maybe applied
/// (with the peer's error as their source, if it ended with one), the queued one as not sent,
/// and every unit of depth comes back.
#[tokio::test(flavor = "current_thread")]
async fn a_peer_that_ends_mid_pipeline_fails_sent_and_queued_requests_apart() {
    for error in [false, true] {
        let (pool, mut streams) = manual_pool(4);
        let (mut sent, stream) = on_the_wire(&pool, &mut streams, 1..=3).await;
        stream.answer(10);
        if error {
            stream.fail("reset");
        }
        drop(stream);
        let d = queue(&pool, 4).await;
        assert_eq!(answered(sent.remove(0)).await, Answer(10));
        for sent in sent {
            match outcome(sent).await {
                Err(RequestError::StreamEnded {
                    reach: Reach::MaybeApplied,
                    source,
                }) => assert_eq!(source.is_some(), error, "the peer's error is the source"),
                other => panic!("expected maybe applied, got {other:?}"),
            }
        }
        assert_eq!(stream_ended(d).await, Reach::NotSent);
        settle(|| pool.stats().table.empty == 1).await;
        assert_eq!(tally(&pool), (1, 3, 0, 0, 0, 1));
        assert_eq!(in_flight(&pool), 0);
    }
}

/// A cancelled request's unit of depth, held for its response, comes back when the stream
/// ends instead.
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_requests_depth_comes_back_when_the_stream_ends() {
    let (pool, mut streams) = manual_pool(2);
    let (sent, stream) = on_the_wire(&pool, &mut streams, 1..=1).await;
    drop(sent);
    crate::common::run_spawned().await;
    assert_eq!(in_flight(&pool), 1);
    drop(stream);
    settle(|| in_flight(&pool) == 0).await;
    assert_eq!(pool.stats().table.empty, 1);
    assert_eq!(tally(&pool), (0, 0, 1, 0, 0, 1));
}

/// The hung-peer check sees an in-order stream's outstanding requests: a peer that reads
/// requests and never answers is declared stalled, and the caller learns it was maybe applied.
#[tokio::test(flavor = "current_thread")]
async fn an_in_order_peer_that_never_answers_is_declared_stalled() {
    const SECOND: Duration = Duration::from_secs(1);
    let time = MockTime::new();
    let peer = Peer::echo();
    peer.mute.store(true, Ordering::SeqCst);
    let pool = peer
        .builder(1, 2)
        .stall_timeout(Some(5 * SECOND))
        .reaped_by_hand(&time)
        .build()
        .expect("valid configuration");
    let waiting = queue(&pool, 1).await;
    settle(|| pool.stats().table.ready == 1).await;
    crate::common::run_spawned().await;
    pool.reap(time.now());
    time.advance(5 * SECOND);
    pool.reap(time.now());
    match outcome(waiting).await {
        Err(error @ RequestError::Stalled { .. }) => {
            assert_eq!(error.reach(), Reach::MaybeApplied)
        }
        other => panic!("expected a stall, got {other:?}"),
    }
    assert_eq!(pool.stats().stalls, 1);
}

/// An idle in-order stream is reaped like any other: after a pass notes it idle and one idle
/// timeout passes, its slot is empty.
#[tokio::test(flavor = "current_thread")]
async fn an_idle_in_order_stream_is_reaped() {
    let time = MockTime::new();
    let pool = Peer::echo()
        .builder(2, 2)
        .idle_timeout(Duration::from_secs(1))
        .reaped_by_hand(&time)
        .build()
        .expect("valid configuration");
    let answer = pool.acquire().await.expect("acquired").send(Ask(5)).await;
    assert_eq!(answer.expect("answered"), Answer(5));
    pool.reap(time.now());
    time.advance(Duration::from_secs(1));
    assert_eq!(pool.reap(time.now()), 1);
    settle(|| pool.stats().table.empty == 2).await;
}
