//! The depth-1 reference ([`RefDepth1Pool`]) does what its design says, and the depth-1 cases
//! measure the states they name:
//!
//! * a stream with a request in flight goes to no other caller, and no stream ever carries
//!   two requests at once, for the reference and for slotpool at `max_queue_depth(1)`, under
//!   many tasks sharing a few streams;
//! * idle streams are handed out lowest id first;
//! * a guard dropped while its request is in flight does not give its stream back: the stream
//!   is dropped (its task ends and closes it) and the next caller gets a new one; a guard whose
//!   response arrived does give it back;
//! * the 256-240-busy fixtures leave 240 of 256 open streams checked out in both pools, and the
//!   next acquire of each lands on stream 240;
//! * every depth-1 case runs and reports slotpool, `reference-depth1` and the floor.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use slotpool::stream::{Connector, Outbound, StreamPool};
use slotpool_bench::cases::stream::slotpool_pool;
use slotpool_bench::cases::stream_depth1::{
    fill_reference, fill_slotpool, reference_pool, BUSY_HELD, BUSY_STREAMS, CASES, DEPTH, REFERENCE,
};
use slotpool_bench::fixtures::{current_thread, settle, Msg, NoopConnector};
use slotpool_bench::reference::stream::{RefConnector, RefError, RefOutbound};
use slotpool_bench::reference::stream_depth1::{RefDepth1Guard, RefDepth1Pool};
use slotpool_bench::report::{run_cases, Settings};
use tokio::runtime::Runtime;

/// What the [`Tally`] streams saw, shared by all of them.
#[derive(Debug, Default)]
struct Counts {
    /// Streams connected.
    opened: AtomicUsize,
    /// Streams whose inbound half has been dropped (the stream closed).
    closed: AtomicUsize,
    /// The most requests any one stream held unanswered at once.
    max_unanswered: AtomicUsize,
    /// Requests answered.
    answered: AtomicUsize,
}

/// Opens streams that count what they carry. A stream reads every request it has been sent,
/// and answers the oldest (with itself) only on the poll after it read it, so a pool that put
/// a second request on a stream before the first was answered would be seen doing it.
#[derive(Debug, Clone)]
struct Tally {
    counts: Arc<Counts>,
    /// Whether streams answer at all.
    answer: bool,
    /// A stream ends (cleanly) after answering this many requests.
    end_after: Option<usize>,
}

impl Tally {
    /// Streams that answer every request.
    fn answering() -> Self {
        Self {
            counts: Arc::default(),
            answer: true,
            end_after: None,
        }
    }

    /// Streams that never answer.
    fn silent() -> Self {
        Self {
            answer: false,
            ..Self::answering()
        }
    }

    /// Streams that end after answering `n` requests.
    fn ending_after(n: usize) -> Self {
        Self {
            end_after: Some(n),
            ..Self::answering()
        }
    }

    fn open<O>(&self, outbound: O) -> TallyStream<O> {
        self.counts.opened.fetch_add(1, SeqCst);
        TallyStream {
            outbound,
            unanswered: VecDeque::new(),
            read_last_poll: false,
            answered: 0,
            tally: self.clone(),
        }
    }
}

struct TallyStream<O> {
    outbound: O,
    unanswered: VecDeque<Msg>,
    /// Whether the last poll read a request (the answer waits one poll more).
    read_last_poll: bool,
    /// Requests this stream answered.
    answered: usize,
    tally: Tally,
}

impl<O> Drop for TallyStream<O> {
    fn drop(&mut self) {
        self.tally.counts.closed.fetch_add(1, SeqCst);
    }
}

impl<O: Stream<Item = Msg> + Unpin> Stream for TallyStream<O> {
    type Item = Result<Msg, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.tally.end_after == Some(this.answered) {
            return Poll::Ready(None);
        }
        let mut read = false;
        while let Poll::Ready(Some(request)) = Pin::new(&mut this.outbound).poll_next(cx) {
            this.unanswered.push_back(request);
            read = true;
        }
        let counts = &this.tally.counts;
        counts
            .max_unanswered
            .fetch_max(this.unanswered.len(), SeqCst);
        if !this.tally.answer || this.unanswered.is_empty() {
            return Poll::Pending;
        }
        if read || !this.read_last_poll {
            // Give the pool a turn to send more before answering.
            this.read_last_poll = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.read_last_poll = false;
        match this.unanswered.pop_front() {
            Some(response) => {
                this.answered += 1;
                counts.answered.fetch_add(1, SeqCst);
                Poll::Ready(Some(Ok(response)))
            }
            None => Poll::Pending,
        }
    }
}

impl Connector for Tally {
    type Request = Msg;
    type Response = Msg;
    type Error = Infallible;
    type Inbound = TallyStream<Outbound<Msg>>;

    fn connect(
        &self,
        outbound: Outbound<Msg>,
    ) -> impl Future<Output = Result<Self::Inbound, Infallible>> + Send {
        std::future::ready(Ok(self.open(outbound)))
    }
}

impl RefConnector for Tally {
    type RefInbound = TallyStream<RefOutbound<Msg>>;

    fn connect_ref(
        &self,
        outbound: RefOutbound<Msg>,
    ) -> impl Future<Output = Result<Self::RefInbound, Infallible>> + Send {
        std::future::ready(Ok(self.open(outbound)))
    }
}

/// Tasks in the depth test, sharing [`STREAMS`] streams.
const TASKS: usize = 16;
/// Requests per task.
const ROUNDS: u64 = 50;
/// Streams in the depth test.
const STREAMS: usize = 4;

fn request(task: usize, round: u64) -> Msg {
    Msg {
        id: None,
        body: task as u64 * 1_000 + round,
    }
}

/// Runs [`TASKS`] tasks on `rt`, each making [`ROUNDS`] calls of `round(pool, task, round)`,
/// which returns the response's body; checks every caller got its own answer, every stream
/// held at most one unanswered request, and `tally` opened [`STREAMS`] streams.
fn load<P, F, Fut>(rt: &Runtime, pool: &Arc<P>, tally: &Tally, round: F)
where
    P: Send + Sync + 'static,
    F: Fn(Arc<P>, usize, u64) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = Option<u64>> + Send,
{
    rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let pool = Arc::clone(pool);
                tokio::spawn(async move {
                    for r in 0..ROUNDS {
                        let body = round(Arc::clone(&pool), t, r).await;
                        assert_eq!(body, Some(request(t, r).body), "its own answer");
                    }
                })
            })
            .collect();
        for task in tasks {
            assert!(task.await.is_ok(), "a caller failed");
        }
    });
    let counts = &tally.counts;
    assert_eq!(counts.answered.load(SeqCst), TASKS * ROUNDS as usize);
    let max = counts.max_unanswered.load(SeqCst);
    assert_eq!(max, 1, "depth 1 on every stream");
    let opened = counts.opened.load(SeqCst);
    assert_eq!(opened, STREAMS, "as many streams as permits");
}

#[test]
fn the_reference_never_puts_two_requests_on_one_stream() {
    let rt = current_thread();
    let tally = Tally::answering();
    let pool = Arc::new(RefDepth1Pool::new(tally.clone(), Some(STREAMS)));
    load(&rt, &pool, &tally, |pool, t, r| async move {
        let mut guard = pool.get().await;
        guard.send(request(t, r)).await.ok().map(|m| m.body)
    });
    assert_eq!(pool.idle_ids(), (0..STREAMS).collect::<Vec<_>>());
}

#[test]
fn slotpool_at_depth_one_never_puts_two_requests_on_one_stream() {
    let rt = current_thread();
    let tally = Tally::answering();
    let pool: Arc<StreamPool<Tally>> = Arc::new(slotpool_pool(&rt, tally.clone(), STREAMS, 1));
    load(&rt, &pool, &tally, |pool, t, r| async move {
        match pool.acquire().await {
            Ok(guard) => guard.send(request(t, r)).await.ok().map(|m| m.body),
            Err(_) => None,
        }
    });
}

#[test]
fn a_stream_with_a_request_in_flight_goes_to_no_one_else() {
    let rt = current_thread();
    let tally = Tally::silent();
    let pool = RefDepth1Pool::new(tally.clone(), Some(4));
    let counts = Arc::clone(&tally.counts);
    rt.block_on(async {
        // Stream 0 opened and given back: the next get takes it from the map.
        drop(pool.get().await);
        let mut first = pool.get().await;
        assert_eq!(first.stream_id(), 0);
        let mut first_send = pin!(first.send(request(1, 1)));
        let polled = std::future::poll_fn(|cx| Poll::Ready(first_send.as_mut().poll(cx))).await;
        assert!(polled.is_pending());
        // With stream 0 busy, another caller gets a stream of its own.
        let mut second = pool.get().await;
        assert_eq!(second.stream_id(), 1);
        abandon_send(&mut second).await;
        settle(|| counts.opened.load(SeqCst) == 2).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    });
    assert_eq!(
        counts.max_unanswered.load(SeqCst),
        1,
        "one request per stream"
    );
}

#[test]
fn idle_streams_go_out_lowest_id_first() {
    let rt = current_thread();
    let pool = RefDepth1Pool::new(NoopConnector, Some(8));
    rt.block_on(async {
        let (a, b, c) = (pool.get().await, pool.get().await, pool.get().await);
        let opened = [a.stream_id(), b.stream_id(), c.stream_id()];
        assert_eq!(opened, [0, 1, 2], "none idle: each get opens the next id");
        drop(c);
        drop(a);
        drop(b);
        assert_eq!(pool.idle_ids(), [0, 1, 2]);
        let first = pool.get().await;
        let second = pool.get().await;
        assert_eq!((first.stream_id(), second.stream_id()), (0, 1));
        drop(first);
        assert_eq!(pool.idle_ids(), [0, 2]);
        let again = pool.get().await;
        let next = pool.get().await;
        let new = pool.get().await;
        assert_eq!(
            (again.stream_id(), next.stream_id(), new.stream_id()),
            (0, 2, 3)
        );
    });
}

/// Sends on `guard` and drops the send future after its first poll, when the request has
/// been queued for the stream but not answered.
async fn abandon_send(guard: &mut RefDepth1Guard<Tally>) {
    let mut send = pin!(guard.send(request(0, 0)));
    let polled = std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await;
    assert!(polled.is_pending(), "no answer yet");
}

#[test]
fn a_guard_dropped_before_its_response_drops_its_stream() {
    let rt = current_thread();
    let tally = Tally::silent();
    let pool = RefDepth1Pool::new(tally.clone(), Some(1));
    let counts = Arc::clone(&tally.counts);
    rt.block_on(async {
        let mut guard = pool.get().await;
        assert_eq!(guard.stream_id(), 0);
        abandon_send(&mut guard).await;
        drop(guard);
        assert!(pool.idle_ids().is_empty(), "not given back");
        // Its sender gone, the stream's task forwards the queued request, ends, and closes
        // the stream.
        settle(|| counts.opened.load(SeqCst) == 1 && counts.closed.load(SeqCst) == 1).await;
        // The permit came back (the pool has one): the next caller gets a new stream.
        let next = pool.get().await;
        assert_eq!(next.stream_id(), 1);
        drop(next);
        assert_eq!(
            pool.idle_ids(),
            [1],
            "an unused guard gives its stream back"
        );
    });
    assert_eq!(counts.max_unanswered.load(SeqCst), 1);
}

#[test]
fn a_guard_whose_response_arrived_gives_its_stream_back() {
    let rt = current_thread();
    let tally = Tally::answering();
    let pool = RefDepth1Pool::new(tally.clone(), Some(1));
    rt.block_on(async {
        let mut guard = pool.get().await;
        let first = guard.send(request(0, 1)).await;
        assert_eq!(first.ok().map(|m| m.body), Some(1));
        let second = guard.send(request(0, 2)).await;
        assert_eq!(
            second.ok().map(|m| m.body),
            Some(2),
            "still exclusive, still usable"
        );
        drop(guard);
        assert_eq!(pool.idle_ids(), [0]);
        let mut again = pool.get().await;
        assert_eq!(again.stream_id(), 0, "the same stream, reused");
        assert!(matches!(again.send(request(0, 3)).await, Ok(m) if m.body == 3));
    });
    assert_eq!(tally.counts.opened.load(SeqCst), 1);
}

#[test]
fn a_stream_that_ended_is_not_given_back() {
    let rt = current_thread();
    let tally = Tally::ending_after(1);
    let pool = RefDepth1Pool::new(tally.clone(), Some(2));
    let counts = Arc::clone(&tally.counts);
    rt.block_on(async {
        // Stream 0 answers, then ends while its guard is still held.
        let mut guard = pool.get().await;
        assert!(matches!(guard.send(request(0, 1)).await, Ok(m) if m.body == 1));
        settle(|| counts.closed.load(SeqCst) == 1).await;
        drop(guard);
        assert!(
            pool.idle_ids().is_empty(),
            "an ended stream is not given back"
        );
        // Stream 1 answers and ends around its guard's drop: whether the guard sees the end or
        // gives the stream back first, the ended stream's task takes it out of the map.
        let mut guard = pool.get().await;
        assert_eq!(guard.stream_id(), 1);
        assert!(matches!(guard.send(request(0, 2)).await, Ok(m) if m.body == 2));
        let mut after = pool.get().await;
        assert_eq!(after.stream_id(), 2);
        drop(guard);
        settle(|| counts.closed.load(SeqCst) == 2).await;
        assert!(pool.idle_ids().is_empty());
        assert!(matches!(after.send(request(0, 3)).await, Ok(m) if m.body == 3));
        // Stream 2 has now answered once and ends: the next request on it fails, and the
        // guard does not give it back.
        settle(|| counts.closed.load(SeqCst) == 3).await;
        assert!(matches!(
            after.send(request(0, 4)).await,
            Err(RefError::StreamClosed)
        ));
        drop(after);
        assert!(pool.idle_ids().is_empty());
    });
}

#[test]
fn the_busy_fixtures_hold_240_of_256_streams_in_both_pools() {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, NoopConnector, BUSY_STREAMS, DEPTH);
    let held = fill_slotpool(&rt, &pool);
    assert_eq!(held.len(), BUSY_HELD);
    assert!(held
        .iter()
        .all(|g| g.stream_index().is_some_and(|i| i < BUSY_HELD)));
    let stats = pool.stats().table;
    assert_eq!(stats.ready, BUSY_STREAMS, "256 streams open");
    assert_eq!(stats.in_flight, BUSY_HELD as u64, "240 checked out");
    let next = pool.try_acquire().ok().and_then(|g| g.stream_index());
    assert_eq!(next, Some(BUSY_HELD), "the next acquire takes stream 240");

    let reference = reference_pool(&rt, BUSY_STREAMS);
    let ref_held = fill_reference(&rt, &reference);
    let ids: Vec<_> = ref_held.iter().map(|g| g.stream_id()).collect();
    assert_eq!(ids, (0..BUSY_HELD).collect::<Vec<_>>(), "240 checked out");
    assert_eq!(
        reference.idle_ids(),
        (BUSY_HELD..BUSY_STREAMS).collect::<Vec<_>>(),
        "16 idle: 256 open"
    );
    let next = rt.block_on(reference.get()).stream_id();
    assert_eq!(next, BUSY_HELD, "the next get takes stream 240");
}

#[test]
fn every_case_runs_and_reports_its_three_implementations() {
    let records = run_cases(CASES, &Settings::smoke(), |_| true);
    for &(case, _) in CASES {
        for name in ["slotpool", REFERENCE, "floor"] {
            let record = records
                .iter()
                .find(|r| r.case == case && r.impl_name == name);
            assert!(record.is_some_and(|r| r.ops > 0), "{case} {name}");
        }
    }
    assert_eq!(records.len(), CASES.len() * 3);
}
