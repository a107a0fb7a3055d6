//! Differential driver for `slotpool::stream::StreamPool`: decodes a pool's configuration and a
//! sequence of operations from bytes, runs each operation on a real pool single-threaded (a
//! current-thread tokio runtime whose paused clock never moves, a mock clock for the pool, a
//! scripted connector whose connects succeed, fail, panic in the call or in the future, or hang
//! until the driver lets them end, and a scripted peer per stream that answers, answers what nobody
//! asked, fails, ends or panics mid-stream) and on a plain sequential model, and panics on the
//! first difference in an outcome (the error's variant, its timeout or id, and that a retry is
//! safe), in `stats()`, in a guard the driver holds (its stream), in what each peer has received
//! and not answered, in the connector's own books (connects, streams opened, closed, alive), or
//! (with the `metrics` feature) in what the pool exports.
//!
//! # The model
//!
//! Written from the stream pool's documentation (the module docs of `stream`, the builder's setters
//! and its table, `StreamPool::reap`, `try_acquire`, `close`, `StreamStats`, `Correlation`,
//! `RequestError`, the breaker's protocol in `protocol/breaker.rs`, `TableStats`,
//! `docs/pinned.md`), not from its code. What it models, by the docs' words:
//!
//! * Placement: an acquire joins "the lowest-index stream with room" (starting or ready, fewer than
//!   `max_queue_depth` units); "when every stream is full, the acquire claims an Empty slot" (the
//!   lowest) and starts a stream there, which callers may join "while it connects (their requests
//!   queue until it is ready)"; with `max_streams` streams live it waits (one waiter at a time
//!   here, served when room appears) and `try_acquire` answers `NoCapacity`. After `close`,
//!   acquires and the waiter get `Closed`.
//! * The breaker: only a spin-up consults it; "after `consecutive_failures` connect failures in a
//!   row, acquires that would open a new stream fail fast with `Unavailable` for `backoff` (on the
//!   pool's clock); then one probe connect is let through" (others fail fast until it reports); a
//!   successful connect closes it. An open timeout counts as a connect failure, a stall does not.
//!   Refusals are counted in `breaker_rejections` (acquires only: the `min_streams` top-up is not
//!   an acquire).
//! * Units of depth: a guard holds one; its drop gives it back at once. A sent request's unit is
//!   released "by the driver, when the response arrives or the stream ends, not when the caller's
//!   future is dropped", except a request still queued while its stream connects, which gives its
//!   room back when its caller gives up. A slot that failed drains and "returns to Empty when its
//!   last unit of load is released".
//! * Failures and their reach: a connect error fails every caller that joined with `Connect`; a
//!   connect that panics (call or future) with `Panicked`, both not sent, counted in
//!   `connect_failures` (and `panics`). A stream error or end fails "every request in flight on it
//!   with `StreamEnded` and `MaybeApplied`"; an inbound half that panics does the same with
//!   `Panicked`; counted in `stream_failures`. A guard sent on a stream that already failed fails
//!   not sent with the stream's reason.
//! * Routing by id: the pool gives an id to each request that carries none; a response whose id no
//!   request carries is discarded (`unknown_responses`); a caller-supplied id already in flight
//!   fails `DuplicateId`; a request whose id accessor panics fails alone, not sent.
//! * Panics of user code: "the inbound half's `poll_next` and destructor" and the request id
//!   accessors are called inside a guard and counted in `panics`.
//! * In order: each response goes to the oldest request sent, cancelled or not (a cancelled
//!   request's response is consumed in turn, `late_responses`); a response with nothing outstanding
//!   is counted in `unknown_responses` and closes the stream as failed. The id accessors are never
//!   called and nothing is written to the messages.
//! * `reap(now)`: closes every ready stream with nothing in flight that a previous pass found idle
//!   at least `idle_timeout` before (two passes; "a stream used since the last pass is not
//!   closed"), keeping the lowest `min_streams` live streams (`reaps`; a reaped stream counts
//!   against `max_streams` until its driver let go of it, done by the op's end). Then the hung-peer
//!   backstop, on the pool's clock (tokio's clock never moves here, so only the pass fires them): a
//!   stream still opening `open_timeout` after its start fails its callers `OpenTimeout`, not sent
//!   (`open_timeouts`, `connect_failures`); a stream busy and silent since a previous pass at least
//!   `stall_timeout` before is declared hung: `Stalled` (`stalls`, `stream_failures`). Then streams
//!   are reopened up to `min_streams` (none after `close`).
//! * Stats: every counter of `StreamStats`, the table's live, starting, ready and draining slots,
//!   units in flight and waiters, the breaker's state, and `wait_time` (the mock clock's time
//!   between a wait's first pending poll and its end).
//! * Metrics (with the `metrics` feature): `stats()` exported through `slotpool::metrics` after
//!   every op, each `slotpool_stream_*` gauge and counter of the metrics table against the
//!   model's value for it (`slotpool_stream_slots` in phases `starting`, `ready`, `draining`;
//!   `breaker_state` 0 closed, 1 open, 2 half-open; `wait_nanoseconds` as `wait_time`), and one
//!   `slotpool_stream_wait_seconds` sample per wait that ended (a waiter still waiting has none
//!   yet).
//!
//! Not modelled: tokio's timers for the deadlines (`stream_deadline.rs` checks those: here they are
//! armed and never fire, and the reaper's pass fires the deadlines), the background reaper
//! (`reap_interval(None)`), `acquire_timeout` (tokio's clock never moves here), more than one
//! waiter at a time, borrowed guards (every guard here is owned: the same unit, counted the same),
//! the `Retirement` flag, the logs, the table's allocated slots (so not the `empty` phase of
//! `slotpool_stream_slots`) and the wait samples' values. The pool is dropped only at the end of
//! a run, where the driver checks that every stream the connector opened was closed.
//!
//! Where the docs leave a choice open, the model takes one and says so at the spot ("Choice:").
//!
//! Shared by the `stream_ops` fuzz target and by `cargo test` (`core/tests/replay/main.rs` includes
//! this file with `#[path]` for `stream_fuzz_replay.rs`; it refers to the byte reader as
//! `crate::bytes`, which both crates provide at their root).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_core::Stream;
use slotpool::stream::{
    BreakerState, Correlation, Outbound, OwnedStreamGuard, RequestError, StreamConnector,
    StreamPool,
};
use slotpool::{AcquireError, TryAcquireError};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::bytes::Bytes;

/// Guards (and the sends and the wait they turn into) the ops choose from.
const HOLDERS: usize = 5;
/// Stream slots the peer ops name.
const PEER_SLOTS: usize = 4;
/// Longest op sequence decoded from one input.
const MAX_OPS: usize = 300;
/// One step of the mock clock: every timeout is whole steps, so an `Advance` lands exactly on
/// their boundaries.
const STEP: Duration = Duration::from_secs(1);
/// Yields that let every spawned task run after an op (each op's chain of wake-ups is short).
const SETTLE_YIELDS: usize = 64;
/// Scripted connects queued at most.
const MAX_SCRIPT: usize = 8;
/// Caller-supplied request ids: far from the ones the pool assigns (it counts from zero).
const SUPPLIED_IDS: [u64; 2] = [1 << 32, (1 << 32) + 1];
/// The id of a response no request carries.
const STRAY_ID: u64 = 1 << 40;
/// The body of such a response (bodies of real requests count up from 1).
const STRAY_BODY: u64 = u64::MAX;

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

// ---------------------------------------------------------------------------------------------
// The scripted user code.

#[derive(Debug)]
pub struct FuzzError;

impl std::fmt::Display for FuzzError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("injected failure")
    }
}

impl std::error::Error for FuzzError {}

/// Marks the panics this driver injects (which the pool must contain).
const INJECTED: &str = "injected by stream_ops";

/// What the next connect does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectAct {
    Ok,
    Fail,
    /// Panics when `connect` is called.
    PanicCall,
    /// Panics when the future `connect` returned is polled.
    PanicPoll,
    /// Pending until the driver's `Open` op ends it.
    Hang,
}

/// A request: its id (by id: set by the pool or supplied), its body (unique per send), and
/// whether its id accessor panics.
#[derive(Debug)]
pub struct Req {
    id: Option<u64>,
    body: u64,
    panics: bool,
}

/// A response: the id it names and the body of the request it answers.
#[derive(Debug)]
pub struct Resp {
    id: u64,
    body: u64,
}

/// What a peer puts on its inbound half.
#[derive(Debug)]
enum PeerSays {
    Answer(Resp),
    Fail,
    End,
    Panic,
}

/// The peer's end of one stream: the requests the pool forwarded (`outbound`), those received
/// and not answered yet, and the inbound half's feed.
#[derive(Debug)]
struct Peer {
    outbound: Outbound<Req>,
    tx: mpsc::UnboundedSender<PeerSays>,
    unanswered: Vec<Req>,
    /// The inbound half's destructor panics.
    panic_drop: Arc<AtomicBool>,
}

impl Peer {
    /// Whether the pool still holds the stream's inbound half.
    fn alive(&self) -> bool {
        !self.tx.is_closed()
    }

    /// Takes whatever the pool forwarded since the last look.
    fn receive(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(Some(request)) = Pin::new(&mut self.outbound).poll_next(&mut cx) {
            self.unanswered.push(request);
        }
    }
}

/// What the user code saw and did, and its script.
#[derive(Debug, Default)]
struct Ledger {
    connects: AtomicU64,
    opened: AtomicU64,
    closed: AtomicU64,
    script: Mutex<VecDeque<ConnectAct>>,
    /// The go-ahead of each slot's hanging connect.
    hung: Mutex<HashMap<usize, oneshot::Sender<bool>>>,
    /// Each slot's latest stream.
    peers: Mutex<HashMap<usize, Peer>>,
}

/// The inbound half: yields what the peer says; its drop is the stream's close.
#[derive(Debug)]
pub struct Inbound {
    rx: mpsc::UnboundedReceiver<PeerSays>,
    ledger: Arc<Ledger>,
    panic_drop: Arc<AtomicBool>,
}

impl Stream for Inbound {
    type Item = Result<Resp, FuzzError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(PeerSays::Answer(response))) => Poll::Ready(Some(Ok(response))),
            Poll::Ready(Some(PeerSays::Fail)) => Poll::Ready(Some(Err(FuzzError))),
            Poll::Ready(Some(PeerSays::End)) => Poll::Ready(None),
            Poll::Ready(Some(PeerSays::Panic)) => panic!("{INJECTED}: inbound poll"),
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Inbound {
    fn drop(&mut self) {
        self.ledger.closed.fetch_add(1, Ordering::SeqCst);
        if self.panic_drop.load(Ordering::SeqCst) {
            panic!("{INJECTED}: inbound drop");
        }
    }
}

/// The scripted connector; `IN_ORDER` picks its correlation.
#[derive(Debug)]
pub struct Conn<const IN_ORDER: bool> {
    ledger: Arc<Ledger>,
}

impl<const IN_ORDER: bool> StreamConnector for Conn<IN_ORDER> {
    type Request = Req;
    type Response = Resp;
    type Error = FuzzError;
    type Inbound = Inbound;

    const CORRELATION: Correlation = if IN_ORDER {
        Correlation::InOrder
    } else {
        Correlation::ById
    };

    fn connect(
        &self,
        outbound: Outbound<Req>,
    ) -> impl Future<Output = Result<Inbound, FuzzError>> + Send {
        self.ledger.connects.fetch_add(1, Ordering::SeqCst);
        let act = self
            .ledger
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(ConnectAct::Ok);
        if act == ConnectAct::PanicCall {
            panic!("{INJECTED}: connect call");
        }
        let slot = outbound
            .stream_index()
            .expect("a pool's stream knows its slot");
        let hung = (act == ConnectAct::Hang).then(|| {
            let (go, wait) = oneshot::channel();
            self.ledger.hung.lock().unwrap().insert(slot, go);
            wait
        });
        let ledger = Arc::clone(&self.ledger);
        async move {
            if act == ConnectAct::PanicPoll {
                panic!("{INJECTED}: connect future");
            }
            let opens = match hung {
                Some(wait) => wait.await.unwrap_or(false),
                None => act == ConnectAct::Ok,
            };
            if !opens {
                return Err(FuzzError);
            }
            ledger.opened.fetch_add(1, Ordering::SeqCst);
            let (tx, rx) = mpsc::unbounded_channel();
            let panic_drop = Arc::new(AtomicBool::new(false));
            ledger.peers.lock().unwrap().insert(
                slot,
                Peer {
                    outbound,
                    tx,
                    unanswered: Vec::new(),
                    panic_drop: Arc::clone(&panic_drop),
                },
            );
            Ok(Inbound {
                rx,
                ledger,
                panic_drop,
            })
        }
    }

    fn request_id(&self, request: &Req) -> Option<u64> {
        if request.panics {
            panic!("{INJECTED}: request_id");
        }
        request.id
    }

    fn set_request_id(&self, request: &mut Req, id: u64) {
        request.id = Some(id);
    }

    fn response_id(&self, response: &Resp) -> Option<u64> {
        Some(response.id)
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration and ops.

#[derive(Debug, Clone, Copy)]
struct Cfg {
    in_order: bool,
    max_streams: Option<usize>,
    depth: u64,
    min_streams: usize,
    /// Steps.
    idle: u64,
    open: Option<u64>,
    stall: Option<u64>,
    /// (consecutive failures, backoff steps).
    breaker: Option<(u32, u64)>,
}

impl Cfg {
    fn decode(bytes: &mut Bytes<'_>) -> Self {
        let a = bytes.byte();
        let b = bytes.byte();
        let c = bytes.byte();
        let d = bytes.byte();
        let max_streams = match (a >> 1) % 4 {
            0 => None,
            n => Some(n as usize),
        };
        let steps = |n: u8| match n % 5 {
            0 => None,
            n => Some(u64::from(n)),
        };
        Cfg {
            in_order: a & 1 == 1,
            max_streams,
            depth: 1 + u64::from((a >> 3) % 3),
            min_streams: ((b % 3) as usize).min(max_streams.unwrap_or(usize::MAX)),
            idle: 1 + u64::from((b >> 2) % 4),
            open: steps(c),
            stall: steps(c >> 3),
            breaker: (!d.is_multiple_of(3))
                .then(|| (1 + u32::from((d >> 2) % 3), 1 + u64::from((d >> 4) % 4))),
        }
    }

    fn build<const IN_ORDER: bool>(
        &self,
        ledger: &Arc<Ledger>,
        clock: slotpool::Clock,
    ) -> StreamPool<Conn<IN_ORDER>> {
        let mut builder = StreamPool::builder(Conn::<IN_ORDER> {
            ledger: Arc::clone(ledger),
        })
        .max_queue_depth(self.depth as usize)
        .min_streams(self.min_streams)
        .idle_timeout(STEP * self.idle as u32)
        .reap_interval(None)
        .clock(clock)
        .open_timeout(self.open.map(|s| STEP * s as u32))
        .stall_timeout(self.stall.map(|s| STEP * s as u32));
        builder = match self.max_streams {
            Some(n) => builder.max_streams(n),
            None => builder.unbounded(),
        };
        if let Some((threshold, backoff)) = self.breaker {
            builder = builder.breaker(threshold, STEP * backoff as u32);
        }
        builder.build().expect("every decoded configuration builds")
    }
}

/// What a send carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReqKind {
    /// No id: the pool assigns one (by id).
    Plain,
    /// A caller-supplied id.
    Supplied(u64),
    /// Its id accessor panics (by id; in order it is never called).
    PanicId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `try_acquire_owned` into a free holder.
    Try,
    /// `acquire_owned` into a free holder: served now, or it becomes the waiter.
    Wait,
    /// Drop holder `h`'s guard unsent.
    Drop(usize),
    /// Send on holder `h`'s guard (the send runs in a task of its own).
    Send(usize, ReqKind),
    /// Abort holder `h`'s send or wait.
    Cancel(usize),
    /// The peer of slot `s` answers its `k`-th unanswered request (in order: the oldest).
    Answer(usize, usize),
    /// The peer of slot `s` answers what nobody asked.
    Stray(usize),
    /// The peer of slot `s` fails its stream (an error item).
    Fail(usize),
    /// The peer of slot `s` ends its stream.
    End(usize),
    /// The inbound half of slot `s` panics in its next poll.
    PanicInbound(usize),
    /// The inbound half of slot `s` panics when it is dropped.
    PanicOnDrop(usize),
    /// The hanging connect of slot `s` ends: opened or failed.
    Open(usize, bool),
    /// Queue what the next connect does.
    Script(ConnectAct),
    /// Move the mock clock by whole steps.
    Advance(u64),
    Reap,
    Close,
}

/// What the driver holds in a holder, as compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// An unsent guard on the stream in this slot.
    Guard(usize),
    Sending,
    Waiting,
}

/// How a send or an acquire failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    Connect,
    StreamEnded,
    DuplicateId(u64),
    Closed,
    Panicked,
    /// With the timeout it reports (nanoseconds).
    OpenTimeout(u64),
    Stalled(u64),
    NoCapacity,
    Unavailable,
}

/// A send's end: the response's body, or the failure and whether a retry is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Res {
    Ok(u64),
    Err(Fail, bool),
}

/// Something that ended for a holder during an op (a send, or the wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Sent(Res),
    Acquired(Result<usize, Fail>),
}

/// An op's own result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direct {
    Nothing,
    Done,
    Got(usize),
    Failed(Fail),
    Waiting,
    Count(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    direct: Direct,
    /// By holder.
    events: Vec<(usize, Event)>,
}

fn decode(bytes: &mut Bytes<'_>, holders: &[Option<MHeld>]) -> Op {
    let pick = |bytes: &mut Bytes<'_>, want: &dyn Fn(&MHeld) -> bool| {
        let matching: Vec<usize> = (0..HOLDERS)
            .filter(|&h| holders[h].as_ref().is_some_and(want))
            .collect();
        let b = bytes.below(HOLDERS);
        if matching.is_empty() {
            b
        } else {
            matching[b % matching.len()]
        }
    };
    match bytes.below(21) {
        0..=2 => Op::Try,
        3 => Op::Wait,
        4 => Op::Drop(pick(bytes, &|h| matches!(h, MHeld::Guard(_)))),
        5..=7 => {
            let h = pick(bytes, &|h| matches!(h, MHeld::Guard(_)));
            let kind = match bytes.below(8) {
                0 => ReqKind::Supplied(SUPPLIED_IDS[0]),
                1 => ReqKind::Supplied(SUPPLIED_IDS[1]),
                2 => ReqKind::PanicId,
                _ => ReqKind::Plain,
            };
            Op::Send(h, kind)
        }
        8 => Op::Cancel(pick(bytes, &|h| !matches!(h, MHeld::Guard(_)))),
        9 | 10 => Op::Answer(bytes.below(PEER_SLOTS), bytes.below(4)),
        11 => Op::Stray(bytes.below(PEER_SLOTS)),
        12 => Op::Fail(bytes.below(PEER_SLOTS)),
        13 => Op::End(bytes.below(PEER_SLOTS)),
        14 => Op::PanicInbound(bytes.below(PEER_SLOTS)),
        15 => Op::Open(bytes.below(PEER_SLOTS), !bytes.byte().is_multiple_of(3)),
        16 => Op::Script(match bytes.below(5) {
            0 => ConnectAct::Ok,
            1 => ConnectAct::Fail,
            2 => ConnectAct::PanicCall,
            3 => ConnectAct::PanicPoll,
            _ => ConnectAct::Hang,
        }),
        17 => Op::Advance(1 + bytes.below(3) as u64),
        18 => Op::Reap,
        20 => Op::PanicOnDrop(bytes.below(PEER_SLOTS)),
        _ => {
            if bytes.below(32) == 0 {
                Op::Close
            } else {
                Op::Reap
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    #[default]
    Empty,
    Starting,
    Ready,
    Draining,
}

/// Why a stream stopped taking requests: what its callers are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Connect,
    Panicked,
    OpenTimedOut,
    Ended,
    Stalled,
    /// Reaped (nothing in flight, so nobody is told).
    Reaped,
}

/// A request queued while its stream connects.
#[derive(Debug, Clone, Copy)]
struct Queued {
    /// `None` once its caller gave up.
    owner: Option<usize>,
    body: u64,
    kind: ReqKind,
}

/// A request sent, awaiting its response.
#[derive(Debug, Clone, Copy)]
struct Sent {
    owner: Option<usize>,
    body: u64,
    supplied: Option<u64>,
}

#[derive(Debug, Clone, Default)]
struct MSlot {
    phase: Phase,
    /// Units of depth: guards, requests queued or sent, a reaper's unit.
    load: u64,
    /// Reserved since the reaper's last look.
    used: bool,
    idle_since: u64,
    started: u64,
    /// The stream's connect is the breaker's probe.
    probe: bool,
    /// Its connect hangs.
    hung: bool,
    /// Its inbound half panics when dropped.
    panic_drop: bool,
    queued: VecDeque<Queued>,
    /// The pool's side: requests on the wire, in the order sent.
    wire: VecDeque<Sent>,
    /// The peer's side: bodies received and not answered, in the order received.
    peer: Vec<u64>,
    refusal: Option<Refusal>,
    /// Wake-ups that received something (the stall count's "activity").
    received: u64,
    /// What the reaper's last stall look saw, and since when unchanged.
    stall_seen: Option<(u64, bool)>,
    stall_since: u64,
}

impl MSlot {
    fn accepts(&self) -> bool {
        matches!(self.phase, Phase::Starting | Phase::Ready)
    }

    fn busy(&self) -> bool {
        !self.wire.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MHeld {
    Guard(usize),
    Sending,
    Waiting,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BState {
    Closed,
    Open(u64),
    HalfOpen,
}

/// The breaker, by `protocol/breaker.rs`'s protocol: Closed --(threshold consecutive
/// failures)--> Open(until) --(a spin-up at now >= until: the probe)--> HalfOpen --(success)-->
/// Closed, --(probe fails)--> Open(now + backoff).
#[derive(Debug, Clone, Copy)]
struct MBreaker {
    /// 0: no breaker.
    threshold: u32,
    backoff: u64,
    failures: u64,
    state: BState,
}

impl MBreaker {
    /// `Ok(probe)`, or refused.
    fn admit(&mut self, now: u64) -> Result<bool, ()> {
        match self.state {
            BState::Closed => Ok(false),
            BState::Open(until) if now < until => Err(()),
            BState::Open(_) => {
                self.state = BState::HalfOpen;
                Ok(true)
            }
            BState::HalfOpen => Err(()),
        }
    }

    fn on_success(&mut self) {
        self.failures = 0;
        self.state = BState::Closed;
    }

    fn on_failure(&mut self, now: u64, probe: bool) {
        self.failures += 1;
        if self.threshold == 0 {
            return;
        }
        if probe || self.failures >= u64::from(self.threshold) {
            self.state = BState::Open(now + self.backoff);
        }
    }

    fn state(&self) -> BreakerState {
        match self.state {
            BState::Closed => BreakerState::Closed,
            BState::Open(_) => BreakerState::Open,
            BState::HalfOpen => BreakerState::HalfOpen,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    acquires: u64,
    waits: u64,
    wait_time: u64,
    completed: u64,
    failed: u64,
    cancelled: u64,
    spin_ups: u64,
    connect_failures: u64,
    stream_failures: u64,
    panics: u64,
    open_timeouts: u64,
    stalls: u64,
    reaps: u64,
    late_responses: u64,
    unknown_responses: u64,
    breaker_rejections: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Books {
    connects: u64,
    opened: u64,
    closed: u64,
}

/// A stream driver's work left for the settling of an op, in the order the drivers run.
#[derive(Debug, Clone, Copy)]
enum Work {
    /// Connect the stream started in this slot.
    Connect(usize),
    /// The reaper retired it: let go.
    Reaped(usize),
    /// The reaper's backstop found it opening past `open_timeout`.
    OpenTimedOut(usize),
    /// The reaper's backstop found it stalled.
    Stalled(usize),
}

#[derive(Debug)]
struct Model {
    cfg: Cfg,
    /// Nanoseconds since the pool was built, on the mock clock.
    now: u64,
    slots: Vec<MSlot>,
    holders: Vec<Option<MHeld>>,
    /// The waiting acquire: its holder and when it began to wait.
    waiter: Option<(usize, u64)>,
    closed: bool,
    breaker: MBreaker,
    counts: Counts,
    books: Books,
    script: VecDeque<ConnectAct>,
    next_body: u64,
    work: VecDeque<Work>,
    events: Vec<(usize, Event)>,
}

impl Model {
    fn new(cfg: Cfg) -> Self {
        let (threshold, backoff) = cfg.breaker.unwrap_or((0, 0));
        let mut model = Model {
            cfg,
            now: 0,
            slots: Vec::new(),
            holders: vec![None; HOLDERS],
            waiter: None,
            closed: false,
            breaker: MBreaker {
                threshold,
                backoff: backoff * nanos(STEP),
                failures: 0,
                state: BState::Closed,
            },
            counts: Counts::default(),
            books: Books::default(),
            script: VecDeque::new(),
            next_body: 1,
            work: VecDeque::new(),
            events: Vec::new(),
        };
        // "Opens `n` streams at build."
        model.top_up();
        model.settle();
        model
    }

    fn dump(&self) -> String {
        let mut out = format!(
            "  model: now {} steps, closed {}, waiter {:?}, breaker {:?}, script {:?}\n  holders {:?}",
            self.now / nanos(STEP),
            self.closed,
            self.waiter,
            self.breaker,
            self.script,
            self.holders
        );
        for (i, slot) in self.slots.iter().enumerate() {
            out.push_str(&format!(
                "\n  slot {i}: {:?} load {} used {} idle_since {} started {} probe {} hung {} \
                 queued {:?} wire {:?} peer {:?} refusal {:?} received {} stall {:?}@{}",
                slot.phase,
                slot.load,
                slot.used,
                slot.idle_since,
                slot.started,
                slot.probe,
                slot.hung,
                slot.queued,
                slot.wire,
                slot.peer,
                slot.refusal,
                slot.received,
                slot.stall_seen,
                slot.stall_since
            ));
        }
        out
    }

    fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.phase != Phase::Empty)
            .count()
    }

    fn phase_count(&self, phase: Phase) -> usize {
        self.slots.iter().filter(|s| s.phase == phase).count()
    }

    fn in_flight(&self) -> u64 {
        self.slots.iter().map(|s| s.load).sum()
    }

    fn free_holder(&self) -> Option<usize> {
        self.holders.iter().position(Option::is_none)
    }

    /// A caller's send ended with `res` (a caller that gave up hears nothing).
    fn complete(&mut self, owner: Option<usize>, res: Res) {
        match (owner, res) {
            (Some(h), _) => {
                match res {
                    Res::Ok(_) => self.counts.completed += 1,
                    Res::Err(..) => self.counts.failed += 1,
                }
                self.holders[h] = None;
                self.events.push((h, Event::Sent(res)));
            }
            // "Responses to cancelled callers are discarded and counted."
            (None, Res::Ok(_)) => self.counts.late_responses += 1,
            (None, Res::Err(..)) => {}
        }
    }

    /// The error a request that got as far as `sent` gets from a stream ended by `refusal`.
    fn error(&self, refusal: Refusal, sent: bool) -> Res {
        let fail = match refusal {
            Refusal::Connect => Fail::Connect,
            Refusal::Panicked => Fail::Panicked,
            Refusal::OpenTimedOut => Fail::OpenTimeout(self.cfg.open.unwrap_or(0) * nanos(STEP)),
            Refusal::Ended => Fail::StreamEnded,
            Refusal::Stalled => Fail::Stalled(self.cfg.stall.unwrap_or(0) * nanos(STEP)),
            Refusal::Reaped => unreachable!("a reaped stream has nothing in flight"),
        };
        // Connect failures and open timeouts are never sent.
        let safe = !sent || matches!(refusal, Refusal::Connect | Refusal::OpenTimedOut);
        Res::Err(fail, safe)
    }

    /// A unit of slot `s` goes back; "the slot drains and returns to Empty when its last unit
    /// of load is released".
    fn release(&mut self, s: usize) {
        let slot = &mut self.slots[s];
        assert!(slot.load > 0, "model: release of an empty slot {s}");
        slot.load -= 1;
        self.maybe_empty(s);
    }

    fn maybe_empty(&mut self, s: usize) {
        let slot = &mut self.slots[s];
        if slot.phase == Phase::Draining && slot.load == 0 {
            *slot = MSlot::default();
        }
    }

    /// The lowest Empty slot a claim may take, if the bound allows one.
    fn vacant(&self) -> Option<usize> {
        let i = self
            .slots
            .iter()
            .position(|s| s.phase == Phase::Empty)
            .unwrap_or(self.slots.len());
        self.cfg.max_streams.is_none_or(|max| i < max).then_some(i)
    }

    fn spin_up(&mut self, i: usize, probe: bool, load: u64) {
        if i == self.slots.len() {
            self.slots.push(MSlot::default());
        }
        self.slots[i] = MSlot {
            phase: Phase::Starting,
            load,
            used: true,
            started: self.now,
            probe,
            ..MSlot::default()
        };
        self.counts.spin_ups += 1;
        self.work.push_back(Work::Connect(i));
    }

    /// One reservation: join the lowest stream with room, or claim the lowest vacant slot and
    /// start a stream there (if the breaker allows).
    fn reserve(&mut self) -> Result<usize, Fail> {
        if self.closed {
            return Err(Fail::Closed);
        }
        let depth = self.cfg.depth;
        if let Some(i) = self
            .slots
            .iter()
            .position(|s| s.accepts() && s.load < depth)
        {
            let slot = &mut self.slots[i];
            slot.load += 1;
            slot.used = true;
            self.counts.acquires += 1;
            return Ok(i);
        }
        let Some(i) = self.vacant() else {
            return Err(Fail::NoCapacity);
        };
        match self.breaker.admit(self.now) {
            Ok(probe) => {
                self.spin_up(i, probe, 1);
                self.counts.acquires += 1;
                Ok(i)
            }
            Err(()) => {
                self.counts.breaker_rejections += 1;
                Err(Fail::Unavailable)
            }
        }
    }

    /// "Opens streams until `min_streams` are live"; a prewarmed stream holds no load.
    fn top_up(&mut self) {
        if self.closed {
            return;
        }
        for _ in self.live()..self.cfg.min_streams {
            let Some(i) = self.vacant() else {
                return;
            };
            // Choice: a refusal of the breaker stops the top-up and is not counted (the
            // counter is for acquires).
            match self.breaker.admit(self.now) {
                Ok(probe) => self.spin_up(i, probe, 0),
                Err(()) => return,
            }
        }
    }

    /// Puts a request on an open stream's wire (or fails it alone).
    fn forward(&mut self, s: usize, owner: Option<usize>, body: u64, kind: ReqKind) {
        let mut supplied = None;
        if !self.cfg.in_order {
            match kind {
                ReqKind::PanicId => {
                    self.counts.panics += 1;
                    self.release(s);
                    self.complete(owner, Res::Err(Fail::Panicked, true));
                    return;
                }
                ReqKind::Supplied(id) => {
                    if self.slots[s].wire.iter().any(|w| w.supplied == Some(id)) {
                        self.release(s);
                        self.complete(owner, Res::Err(Fail::DuplicateId(id), true));
                        return;
                    }
                    supplied = Some(id);
                }
                ReqKind::Plain => {}
            }
        }
        let slot = &mut self.slots[s];
        slot.wire.push_back(Sent {
            owner,
            body,
            supplied,
        });
        slot.peer.push(body);
    }

    /// Fails and releases what the stream in `s` holds; the slot drains.
    fn finish(&mut self, s: usize, refusal: Refusal) {
        let slot = &mut self.slots[s];
        slot.phase = Phase::Draining;
        slot.refusal = Some(refusal);
        slot.hung = false;
        slot.peer.clear();
        let wire = std::mem::take(&mut slot.wire);
        let queued = std::mem::take(&mut slot.queued);
        slot.load -= (wire.len() + queued.len()) as u64;
        for sent in wire {
            let res = self.error(refusal, true);
            self.complete(sent.owner, res);
        }
        for queued in queued {
            let res = self.error(refusal, false);
            self.complete(queued.owner, res);
        }
        self.maybe_empty(s);
    }

    fn fail_open(&mut self, s: usize, refusal: Refusal) {
        self.counts.connect_failures += 1;
        let probe = self.slots[s].probe;
        self.breaker.on_failure(self.now, probe);
        self.finish(s, refusal);
    }

    fn open(&mut self, s: usize) {
        self.books.opened += 1;
        self.breaker.on_success();
        let slot = &mut self.slots[s];
        slot.phase = Phase::Ready;
        slot.hung = false;
        // "What queued while the stream connected goes first, in order."
        for queued in std::mem::take(&mut slot.queued) {
            self.forward(s, queued.owner, queued.body, queued.kind);
        }
    }

    /// A served stream ends (the inbound half is dropped: the connector's close).
    fn end_stream(&mut self, s: usize, refusal: Refusal) {
        self.books.closed += 1;
        // "The inbound half's ... destructor" is called inside a guard: its panic is counted.
        if self.slots[s].panic_drop {
            self.counts.panics += 1;
        }
        match refusal {
            Refusal::Reaped => {}
            Refusal::Stalled => {
                self.counts.stalls += 1;
                self.counts.stream_failures += 1;
            }
            Refusal::Panicked => {
                self.counts.panics += 1;
                self.counts.stream_failures += 1;
            }
            _ => self.counts.stream_failures += 1,
        }
        self.finish(s, refusal);
    }

    fn connect(&mut self, s: usize) {
        self.books.connects += 1;
        match self.script.pop_front().unwrap_or(ConnectAct::Ok) {
            ConnectAct::Ok => self.open(s),
            ConnectAct::Fail => self.fail_open(s, Refusal::Connect),
            ConnectAct::PanicCall | ConnectAct::PanicPoll => {
                self.counts.panics += 1;
                self.fail_open(s, Refusal::Panicked);
            }
            ConnectAct::Hang => self.slots[s].hung = true,
        }
    }

    /// The drivers' work after an op, in their order, then the waiter's turn; until nothing is
    /// left.
    fn settle(&mut self) {
        loop {
            while let Some(work) = self.work.pop_front() {
                match work {
                    Work::Connect(s) => self.connect(s),
                    Work::Reaped(s) => {
                        // Nothing in flight: the halves go, then the reaper's unit.
                        self.end_stream(s, Refusal::Reaped);
                        self.release(s);
                    }
                    Work::OpenTimedOut(s) => {
                        self.counts.open_timeouts += 1;
                        self.fail_open(s, Refusal::OpenTimedOut);
                    }
                    Work::Stalled(s) => self.end_stream(s, Refusal::Stalled),
                }
            }
            let Some((h, since)) = self.waiter else {
                return;
            };
            let result = match self.reserve() {
                Err(Fail::NoCapacity) => return,
                result => result,
            };
            self.waiter = None;
            self.counts.wait_time += self.now - since;
            self.holders[h] = result.ok().map(MHeld::Guard);
            self.events.push((h, Event::Acquired(result)));
        }
    }

    /// A response (`Some(body)`) or a stray (`None`) reaches the stream in `s`.
    fn receive(&mut self, s: usize, answer: Option<u64>) {
        self.slots[s].received += 1;
        if self.cfg.in_order {
            let body = answer.unwrap_or(STRAY_BODY);
            match self.slots[s].wire.pop_front() {
                Some(sent) => {
                    self.release(s);
                    self.complete(sent.owner, Res::Ok(body));
                }
                None => {
                    // "A response that arrives with no request outstanding ... closes the
                    // stream as failed."
                    self.counts.unknown_responses += 1;
                    self.end_stream(s, Refusal::Ended);
                }
            }
            return;
        }
        let found = answer.and_then(|body| {
            let wire = &mut self.slots[s].wire;
            let at = wire.iter().position(|w| w.body == body)?;
            wire.remove(at)
        });
        match found {
            Some(sent) => {
                self.release(s);
                self.complete(sent.owner, Res::Ok(sent.body));
            }
            None => self.counts.unknown_responses += 1,
        }
    }

    /// The reaper's stall look at a ready stream: stalled when busy and unchanged since a
    /// look at least `timeout` ago.
    fn check_stall(&mut self, s: usize, timeout: u64) -> bool {
        let now = self.now;
        let slot = &mut self.slots[s];
        let activity = (slot.received, slot.busy());
        let seen = slot.stall_seen.replace(activity);
        if !activity.1 || seen != Some(activity) {
            slot.stall_since = now;
            return false;
        }
        now - slot.stall_since >= timeout
    }

    fn reap(&mut self) -> usize {
        let now = self.now;
        let timeout = self.cfg.idle * nanos(STEP);
        let mut live_seen = 0;
        let mut reaped = 0;
        for s in 0..self.slots.len() {
            let slot = &mut self.slots[s];
            if slot.phase != Phase::Empty {
                live_seen += 1;
            }
            // Choice: only an open stream can be idle ("no request in flight"); one still
            // opening, even with nobody on it, is the open timeout's.
            if slot.phase != Phase::Ready || slot.load != 0 || live_seen <= self.cfg.min_streams {
                continue;
            }
            if slot.used {
                slot.used = false;
                slot.idle_since = now;
                continue;
            }
            if now - slot.idle_since < timeout {
                continue;
            }
            // It counts against `max_streams` (one unit held) until its driver let go.
            slot.phase = Phase::Draining;
            slot.load = 1;
            reaped += 1;
            self.work.push_back(Work::Reaped(s));
        }
        self.counts.reaps += reaped as u64;
        for s in 0..self.slots.len() {
            match self.slots[s].phase {
                Phase::Starting => {
                    if let Some(open) = self.cfg.open {
                        if now - self.slots[s].started >= open * nanos(STEP) {
                            self.work.push_back(Work::OpenTimedOut(s));
                        }
                    }
                }
                Phase::Ready => {
                    if let Some(stall) = self.cfg.stall {
                        if self.check_stall(s, stall * nanos(STEP)) {
                            self.work.push_back(Work::Stalled(s));
                        }
                    }
                }
                _ => {}
            }
        }
        self.top_up();
        reaped
    }

    fn apply(&mut self, op: Op) -> Outcome {
        let direct = self.apply_direct(op);
        self.settle();
        let mut events = std::mem::take(&mut self.events);
        events.sort_by_key(|(h, _)| *h);
        Outcome { direct, events }
    }

    fn ready(&self, s: usize) -> bool {
        self.slots
            .get(s)
            .is_some_and(|slot| slot.phase == Phase::Ready)
    }

    fn apply_direct(&mut self, op: Op) -> Direct {
        match op {
            Op::Try => {
                let Some(h) = self.free_holder() else {
                    return Direct::Nothing;
                };
                match self.reserve() {
                    Ok(i) => {
                        self.holders[h] = Some(MHeld::Guard(i));
                        Direct::Got(i)
                    }
                    Err(fail) => Direct::Failed(fail),
                }
            }
            Op::Wait => {
                let Some(h) = self.free_holder() else {
                    return Direct::Nothing;
                };
                if self.waiter.is_some() {
                    return Direct::Nothing;
                }
                match self.reserve() {
                    Ok(i) => {
                        self.holders[h] = Some(MHeld::Guard(i));
                        Direct::Got(i)
                    }
                    Err(Fail::NoCapacity) => {
                        self.counts.waits += 1;
                        self.waiter = Some((h, self.now));
                        self.holders[h] = Some(MHeld::Waiting);
                        Direct::Waiting
                    }
                    Err(fail) => Direct::Failed(fail),
                }
            }
            Op::Drop(h) => match self.holders[h] {
                Some(MHeld::Guard(s)) => {
                    self.holders[h] = None;
                    self.release(s);
                    Direct::Done
                }
                _ => Direct::Nothing,
            },
            Op::Send(h, kind) => {
                let Some(MHeld::Guard(s)) = self.holders[h] else {
                    return Direct::Nothing;
                };
                let body = self.next_body;
                self.next_body += 1;
                self.holders[h] = Some(MHeld::Sending);
                match self.slots[s].phase {
                    Phase::Starting => self.slots[s].queued.push_back(Queued {
                        owner: Some(h),
                        body,
                        kind,
                    }),
                    Phase::Ready => self.forward(s, Some(h), body, kind),
                    Phase::Draining => {
                        // The stream stopped taking requests: not sent, for its reason; the
                        // guard's unit goes back with it.
                        let refusal = self.slots[s].refusal.expect("a drained slot's reason");
                        let res = self.error(refusal, false);
                        self.release(s);
                        self.complete(Some(h), res);
                    }
                    Phase::Empty => unreachable!("a guard keeps its slot"),
                }
                Direct::Done
            }
            Op::Cancel(h) => match self.holders[h] {
                Some(MHeld::Sending) => {
                    self.holders[h] = None;
                    self.counts.cancelled += 1;
                    for s in 0..self.slots.len() {
                        let slot = &mut self.slots[s];
                        if let Some(at) = slot.queued.iter().position(|q| q.owner == Some(h)) {
                            // Never sent: its room comes back.
                            slot.queued.remove(at);
                            self.release(s);
                            break;
                        }
                        if let Some(sent) = slot.wire.iter_mut().find(|w| w.owner == Some(h)) {
                            // Sent: its unit stays until its response or the stream's end.
                            sent.owner = None;
                            break;
                        }
                    }
                    Direct::Done
                }
                Some(MHeld::Waiting) => {
                    self.holders[h] = None;
                    let (_, since) = self.waiter.take().expect("the waiter");
                    self.counts.wait_time += self.now - since;
                    Direct::Done
                }
                _ => Direct::Nothing,
            },
            Op::Answer(s, k) => {
                if !self.ready(s) || self.slots[s].peer.is_empty() {
                    return Direct::Nothing;
                }
                let peer = &mut self.slots[s].peer;
                let at = if self.cfg.in_order { 0 } else { k % peer.len() };
                let body = peer.remove(at);
                self.receive(s, Some(body));
                Direct::Done
            }
            Op::Stray(s) => {
                if !self.ready(s) {
                    return Direct::Nothing;
                }
                self.receive(s, None);
                Direct::Done
            }
            Op::Fail(s) | Op::End(s) => {
                if !self.ready(s) {
                    return Direct::Nothing;
                }
                self.end_stream(s, Refusal::Ended);
                Direct::Done
            }
            Op::PanicInbound(s) => {
                if !self.ready(s) {
                    return Direct::Nothing;
                }
                self.end_stream(s, Refusal::Panicked);
                Direct::Done
            }
            Op::PanicOnDrop(s) => {
                if !self.ready(s) {
                    return Direct::Nothing;
                }
                self.slots[s].panic_drop = true;
                Direct::Done
            }
            Op::Open(s, ok) => {
                let hung = self
                    .slots
                    .get(s)
                    .is_some_and(|slot| slot.phase == Phase::Starting && slot.hung);
                if !hung {
                    return Direct::Nothing;
                }
                self.slots[s].hung = false;
                if ok {
                    self.open(s);
                } else {
                    self.fail_open(s, Refusal::Connect);
                }
                Direct::Done
            }
            Op::Script(act) => {
                if self.script.len() < MAX_SCRIPT {
                    self.script.push_back(act);
                }
                Direct::Done
            }
            Op::Advance(steps) => {
                self.now += steps * nanos(STEP);
                Direct::Done
            }
            Op::Reap => Direct::Count(self.reap()),
            Op::Close => {
                self.closed = true;
                if let Some((h, since)) = self.waiter.take() {
                    self.counts.wait_time += self.now - since;
                    self.holders[h] = None;
                    self.events.push((h, Event::Acquired(Err(Fail::Closed))));
                }
                Direct::Done
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The driver.

type Cell<T> = Arc<Mutex<Option<T>>>;
type Guard<const IN_ORDER: bool> = OwnedStreamGuard<Conn<IN_ORDER>>;

enum DHeld<const IN_ORDER: bool> {
    Guard(Guard<IN_ORDER>),
    Sending(JoinHandle<()>, Cell<Res>),
    Waiting(JoinHandle<()>, Cell<Result<Guard<IN_ORDER>, Fail>>),
}

fn classify(cfg: &Cfg, result: Result<Resp, RequestError<FuzzError>>) -> Res {
    let error = match result {
        Ok(response) => return Res::Ok(response.body),
        Err(error) => error,
    };
    let safe = error.reach().retry_is_safe();
    let fail = match error {
        RequestError::Connect { .. } => Fail::Connect,
        RequestError::StreamEnded { .. } => Fail::StreamEnded,
        RequestError::DuplicateId { id } => Fail::DuplicateId(id),
        RequestError::Closed => Fail::Closed,
        RequestError::Panicked { panic, .. } => {
            assert!(
                panic.to_string().contains(INJECTED),
                "{cfg:?}: a contained panic carries its message: {panic}"
            );
            Fail::Panicked
        }
        RequestError::OpenTimeout { timeout } => Fail::OpenTimeout(nanos(timeout)),
        RequestError::Stalled { timeout, .. } => Fail::Stalled(nanos(timeout)),
        other => panic!("an error the model does not know: {other:?}"),
    };
    Res::Err(fail, safe)
}

fn unavailable(cfg: &Cfg, retry_after: Duration) -> Fail {
    let backoff = STEP * cfg.breaker.map_or(0, |(_, b)| b as u32);
    assert!(
        !retry_after.is_zero() && retry_after <= backoff,
        "{cfg:?}: retry_after {retry_after:?} within the backoff"
    );
    Fail::Unavailable
}

fn try_failure(cfg: &Cfg, error: TryAcquireError) -> Fail {
    match error {
        TryAcquireError::NoCapacity => Fail::NoCapacity,
        TryAcquireError::Closed => Fail::Closed,
        TryAcquireError::Unavailable { retry_after } => unavailable(cfg, retry_after),
        other => panic!("an error the model does not know: {other:?}"),
    }
}

fn acquire_failure(cfg: &Cfg, error: AcquireError) -> Fail {
    assert!(error.reach().retry_is_safe(), "{error:?} is NotSent");
    match error {
        AcquireError::Closed => Fail::Closed,
        AcquireError::Unavailable { retry_after } => unavailable(cfg, retry_after),
        other => panic!("an error the model does not know: {other:?}"),
    }
}

/// The pool, the runtime and clock, what the driver holds, and the user code's books.
struct Driver<const IN_ORDER: bool> {
    cfg: Cfg,
    runtime: tokio::runtime::Runtime,
    mock: slotpool::MockClock,
    pool: Arc<StreamPool<Conn<IN_ORDER>>>,
    ledger: Arc<Ledger>,
    holders: Vec<Option<DHeld<IN_ORDER>>>,
    next_body: u64,
    /// What the pool exported: this thread's recorder for the whole run (each wait's sample
    /// as it ends), and each check exports `stats()` under it.
    #[cfg(feature = "metrics")]
    exported: Arc<crate::capture::Capture>,
}

impl<const IN_ORDER: bool> Driver<IN_ORDER> {
    /// Lets every task run until none has anything left to do (no timer fires: tokio's clock
    /// does not move).
    fn settle(&self) {
        self.runtime.block_on(async {
            for _ in 0..SETTLE_YIELDS {
                tokio::task::yield_now().await;
            }
        });
        let mut peers = self.ledger.peers.lock().unwrap();
        for peer in peers.values_mut() {
            peer.receive();
        }
    }

    /// The sends and the wait that ended, by holder.
    fn collect(&mut self) -> Vec<(usize, Event)> {
        let mut events = Vec::new();
        for h in 0..HOLDERS {
            let event = match &self.holders[h] {
                Some(DHeld::Sending(_, cell)) => cell.lock().unwrap().take().map(Event::Sent),
                Some(DHeld::Waiting(_, cell)) => {
                    let taken = cell.lock().unwrap().take();
                    match taken {
                        Some(Ok(guard)) => {
                            let index = guard.stream_index().expect("a guard has a stream");
                            self.holders[h] = Some(DHeld::Guard(guard));
                            events.push((h, Event::Acquired(Ok(index))));
                            continue;
                        }
                        Some(Err(fail)) => Some(Event::Acquired(Err(fail))),
                        None => None,
                    }
                }
                _ => None,
            };
            if let Some(event) = event {
                self.holders[h] = None;
                events.push((h, event));
            }
        }
        events
    }

    fn free_holder(&self) -> Option<usize> {
        self.holders.iter().position(Option::is_none)
    }

    fn peer_op(&self, s: usize, act: impl FnOnce(&mut Peer) -> bool) -> Direct {
        let mut peers = self.ledger.peers.lock().unwrap();
        match peers.get_mut(&s) {
            Some(peer) if peer.alive() => {
                peer.receive();
                if act(peer) {
                    Direct::Done
                } else {
                    Direct::Nothing
                }
            }
            _ => Direct::Nothing,
        }
    }

    fn say(&self, s: usize, says: PeerSays) -> Direct {
        self.peer_op(s, |peer| {
            peer.tx.send(says).expect("the inbound half is alive");
            true
        })
    }

    fn apply(&mut self, op: Op) -> Outcome {
        let direct = self.apply_direct(op);
        self.settle();
        Outcome {
            direct,
            events: self.collect(),
        }
    }

    fn apply_direct(&mut self, op: Op) -> Direct {
        let cfg = self.cfg;
        match op {
            Op::Try => {
                let Some(h) = self.free_holder() else {
                    return Direct::Nothing;
                };
                let _runtime = self.runtime.enter();
                match self.pool.try_acquire_owned() {
                    Ok(guard) => {
                        let index = guard.stream_index().expect("a guard has a stream");
                        self.holders[h] = Some(DHeld::Guard(guard));
                        Direct::Got(index)
                    }
                    Err(error) => Direct::Failed(try_failure(&cfg, error)),
                }
            }
            Op::Wait => {
                let Some(h) = self.free_holder() else {
                    return Direct::Nothing;
                };
                if self
                    .holders
                    .iter()
                    .any(|held| matches!(held, Some(DHeld::Waiting(..))))
                {
                    return Direct::Nothing;
                }
                // Polled once here: served, failed, or waiting (then a task waits on).
                let pool = Arc::clone(&self.pool);
                let first = self.runtime.block_on(async {
                    let mut acquire = Box::pin(async move {
                        let result = pool.acquire_owned().await;
                        result.map_err(|error| acquire_failure(&cfg, error))
                    });
                    let first =
                        std::future::poll_fn(|cx| Poll::Ready(acquire.as_mut().poll(cx))).await;
                    (first, acquire)
                });
                match first {
                    (Poll::Ready(Ok(guard)), _) => {
                        let index = guard.stream_index().expect("a guard has a stream");
                        self.holders[h] = Some(DHeld::Guard(guard));
                        Direct::Got(index)
                    }
                    (Poll::Ready(Err(fail)), _) => Direct::Failed(fail),
                    (Poll::Pending, acquire) => {
                        let cell: Cell<Result<Guard<IN_ORDER>, Fail>> = Arc::default();
                        let out = Arc::clone(&cell);
                        let task = self.runtime.spawn(async move {
                            let result = acquire.await;
                            *out.lock().unwrap() = Some(result);
                        });
                        self.holders[h] = Some(DHeld::Waiting(task, cell));
                        Direct::Waiting
                    }
                }
            }
            Op::Drop(h) => match self.holders[h].take() {
                Some(DHeld::Guard(guard)) => {
                    drop(guard);
                    Direct::Done
                }
                other => {
                    self.holders[h] = other;
                    Direct::Nothing
                }
            },
            Op::Send(h, kind) => match self.holders[h].take() {
                Some(DHeld::Guard(guard)) => {
                    let (id, panics) = match kind {
                        ReqKind::Plain => (None, false),
                        ReqKind::Supplied(id) => (Some(id), false),
                        ReqKind::PanicId => (None, true),
                    };
                    let cell: Cell<Res> = Arc::default();
                    let out = Arc::clone(&cell);
                    let body = self.next_body();
                    let task = self.runtime.spawn(async move {
                        let result = guard.send(Req { id, body, panics }).await;
                        *out.lock().unwrap() = Some(classify(&cfg, result));
                    });
                    self.holders[h] = Some(DHeld::Sending(task, cell));
                    Direct::Done
                }
                other => {
                    self.holders[h] = other;
                    Direct::Nothing
                }
            },
            Op::Cancel(h) => match &self.holders[h] {
                Some(DHeld::Sending(task, _)) | Some(DHeld::Waiting(task, _)) => {
                    task.abort();
                    self.holders[h] = None;
                    Direct::Done
                }
                _ => Direct::Nothing,
            },
            Op::Answer(s, k) => self.peer_op(s, |peer| {
                if peer.unanswered.is_empty() {
                    return false;
                }
                let at = if IN_ORDER {
                    0
                } else {
                    k % peer.unanswered.len()
                };
                let request = peer.unanswered.remove(at);
                let id = if IN_ORDER {
                    0
                } else {
                    request
                        .id
                        .expect("by id, every request on the wire carries an id")
                };
                let response = Resp {
                    id,
                    body: request.body,
                };
                peer.tx
                    .send(PeerSays::Answer(response))
                    .expect("the inbound half is alive");
                true
            }),
            Op::Stray(s) => self.say(
                s,
                PeerSays::Answer(Resp {
                    id: STRAY_ID,
                    body: STRAY_BODY,
                }),
            ),
            Op::Fail(s) => self.say(s, PeerSays::Fail),
            Op::End(s) => self.say(s, PeerSays::End),
            Op::PanicInbound(s) => self.say(s, PeerSays::Panic),
            Op::PanicOnDrop(s) => self.peer_op(s, |peer| {
                peer.panic_drop.store(true, Ordering::SeqCst);
                true
            }),
            Op::Open(s, ok) => {
                let go = self.ledger.hung.lock().unwrap().remove(&s);
                match go.map(|go| go.send(ok)) {
                    Some(Ok(())) => Direct::Done,
                    _ => Direct::Nothing,
                }
            }
            Op::Script(act) => {
                let mut script = self.ledger.script.lock().unwrap();
                if script.len() < MAX_SCRIPT {
                    script.push_back(act);
                }
                Direct::Done
            }
            Op::Advance(steps) => {
                self.mock.advance(STEP * steps as u32);
                Direct::Done
            }
            Op::Reap => {
                let _runtime = self.runtime.enter();
                Direct::Count(self.pool.reap(self.pool.clock().now()))
            }
            Op::Close => {
                self.pool.close();
                Direct::Done
            }
        }
    }

    /// The next request's body: the model numbers sends from 1, one per send on a guard.
    fn next_body(&mut self) -> u64 {
        self.next_body += 1;
        self.next_body
    }
}

/// Runs one op sequence; panics on the first divergence between the pool and the model.
pub fn run(data: &[u8]) {
    crate::injected::pass_injected_panics();
    let mut bytes = Bytes::new(data);
    let cfg = Cfg::decode(&mut bytes);
    if cfg.in_order {
        run_with::<true>(cfg, bytes);
    } else {
        run_with::<false>(cfg, bytes);
    }
}

fn run_with<const IN_ORDER: bool>(cfg: Cfg, mut bytes: Bytes<'_>) {
    // tokio's clock is paused and never moves (no op sleeps, and a runtime that only yields
    // never auto-advances it): the drivers' timers never fire, and the deadlines fire in the
    // `reap(now)` passes on the mock clock (the docs' backstop "where the pool's clock is
    // driven by hand, ahead of tokio's"), which the ops drive. (A runtime without the time
    // driver would do as well, but the builder finds that out through a caught panic, which
    // libFuzzer's panic hook turns into a crash.)
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    else {
        return;
    };
    let ledger = Arc::new(Ledger::default());
    let (clock, mock) = slotpool::Clock::mock();
    // The pool records each wait through the recorder current when the wait ends (a lookup by
    // name each time), so the capture is this thread's recorder for the whole run.
    #[cfg(feature = "metrics")]
    let exported = Arc::new(crate::capture::Capture::default());
    #[cfg(feature = "metrics")]
    let _recorder = metrics::set_default_local_recorder(&*exported);
    let pool = {
        let _runtime = runtime.enter();
        Arc::new(cfg.build::<IN_ORDER>(&ledger, clock))
    };
    let mut driver = Driver {
        cfg,
        runtime,
        mock,
        pool,
        ledger,
        holders: (0..HOLDERS).map(|_| None).collect(),
        next_body: 0,
        #[cfg(feature = "metrics")]
        exported: Arc::clone(&exported),
    };
    driver.settle();
    let mut model = Model::new(cfg);
    let mut ops: Vec<Op> = Vec::new();
    // `STREAM_MODEL_TRACE=1` prints every op, its outcome and the model after it.
    let trace = std::env::var_os("STREAM_MODEL_TRACE").is_some();
    check(&cfg, &ops, &driver, &model);

    let step = |op: Op, ops: &mut Vec<Op>, model: &mut Model, driver: &mut Driver<IN_ORDER>| {
        ops.push(op);
        let want = model.apply(op);
        let got = driver.apply(op);
        if trace {
            eprintln!("{}: {op:?} -> {got:?}\n{}", ops.len() - 1, model.dump());
        }
        if got != want {
            panic!(
                "{}\n  pool:  {got:?}\n  model: {want:?}\n{}",
                trail(&cfg, ops),
                model.dump()
            );
        }
        check(&cfg, ops, driver, model);
    };
    while ops.len() < MAX_OPS && !bytes.is_empty() {
        let op = decode(&mut bytes, &model.holders);
        step(op, &mut ops, &mut model, &mut driver);
    }

    // The end: close; every send and wait is given up and every guard dropped; every peer ends
    // its stream; idle streams are reaped (two passes).
    let idle = Op::Advance(cfg.idle);
    let end = [Op::Close]
        .into_iter()
        .chain((0..HOLDERS).flat_map(|h| [Op::Cancel(h), Op::Drop(h)]))
        .chain((0..PEER_SLOTS).map(Op::End))
        .chain([Op::Reap, idle, Op::Reap]);
    for op in end {
        step(op, &mut ops, &mut model, &mut driver);
    }
    // Then the pool goes: every stream the connector opened is closed.
    let Driver {
        runtime,
        pool,
        ledger,
        holders,
        ..
    } = driver;
    drop(holders);
    assert_eq!(
        Arc::strong_count(&pool),
        1,
        "{}: no task holds the pool at the end",
        trail(&cfg, &ops)
    );
    drop(pool);
    runtime.block_on(async {
        for _ in 0..SETTLE_YIELDS {
            tokio::task::yield_now().await;
        }
    });
    assert_eq!(
        ledger.opened.load(Ordering::SeqCst),
        ledger.closed.load(Ordering::SeqCst),
        "{}: a dropped pool lets go of every stream",
        trail(&cfg, &ops)
    );
}

/// The `pool` label the driver exports `stats()` under (the pool has no `name`, so its wait
/// histogram is labelled `pool = "default"`).
#[cfg(feature = "metrics")]
const EXPORTED_AS: &str = "fuzz";

/// What the pool's `stats()` exports (`slotpool::metrics::Export`, under the driver's capture),
/// against the model: `slotpool_stream_slots` in phases `starting`, `ready` and `draining`,
/// the `in_flight`, `waiting` and `breaker_state` gauges, every counter (`wait_nanoseconds` is
/// the model's `wait_time` on the mock clock), and the samples of
/// `slotpool_stream_wait_seconds` (one per wait that ended: the model's `waits` less the waiter
/// still waiting, if any). Left out: phase `empty`, the table's slots allocated and not in use,
/// which the model does not track (the table allocates in segments; `check` compares only the
/// live ones). The first metric that differs, described.
#[cfg(feature = "metrics")]
fn exported_mismatch<const IN_ORDER: bool>(
    driver: &Driver<IN_ORDER>,
    model: &Model,
) -> Option<String> {
    use slotpool::metrics::Export;
    let exported = &driver.exported;
    metrics::with_local_recorder(&**exported, || driver.pool.stats().export(EXPORTED_AS));
    let waiting = u64::from(model.waiter.is_some());
    let gauges = [
        (
            format!("slotpool_stream_slots{{phase=starting,pool={EXPORTED_AS}}}"),
            model.phase_count(Phase::Starting) as u64,
        ),
        (
            format!("slotpool_stream_slots{{phase=ready,pool={EXPORTED_AS}}}"),
            model.phase_count(Phase::Ready) as u64,
        ),
        (
            format!("slotpool_stream_slots{{phase=draining,pool={EXPORTED_AS}}}"),
            model.phase_count(Phase::Draining) as u64,
        ),
        (
            format!("slotpool_stream_in_flight{{pool={EXPORTED_AS}}}"),
            model.in_flight(),
        ),
        (
            format!("slotpool_stream_waiting{{pool={EXPORTED_AS}}}"),
            waiting,
        ),
        (
            format!("slotpool_stream_breaker_state{{pool={EXPORTED_AS}}}"),
            breaker_code(model.breaker.state()),
        ),
    ];
    for (metric, want) in gauges {
        let got = exported.gauge(&metric);
        if got != want as f64 {
            return Some(format!("exported {metric}: pool {got}, model {want}"));
        }
    }
    let c = &model.counts;
    let counters = [
        ("acquires", c.acquires),
        ("waits", c.waits),
        ("wait_nanoseconds", c.wait_time),
        ("completed", c.completed),
        ("failed", c.failed),
        ("cancelled", c.cancelled),
        ("spin_ups", c.spin_ups),
        ("connect_failures", c.connect_failures),
        ("stream_failures", c.stream_failures),
        ("panics", c.panics),
        ("open_timeouts", c.open_timeouts),
        ("stalls", c.stalls),
        ("reaps", c.reaps),
        ("late_responses", c.late_responses),
        ("unknown_responses", c.unknown_responses),
        ("breaker_rejections", c.breaker_rejections),
    ];
    for (name, want) in counters {
        let metric = format!("slotpool_stream_{name}_total{{pool={EXPORTED_AS}}}");
        let got = exported.counter(&metric);
        if got != want {
            return Some(format!("exported {metric}: pool {got}, model {want}"));
        }
    }
    let metric = "slotpool_stream_wait_seconds{pool=default}";
    let got = exported.samples(metric).len() as u64;
    let want = c.waits - waiting;
    if got != want {
        return Some(format!(
            "samples of {metric}: pool {got}, model {want} (waits ended)"
        ));
    }
    None
}

/// The configuration and the ops so far, for a failure's message.
fn trail(cfg: &Cfg, ops: &[Op]) -> String {
    let last = ops.len().saturating_sub(16);
    let mut out = format!("{cfg:?}\n  after {} ops", ops.len());
    for (i, op) in ops.iter().enumerate().skip(last) {
        out.push_str(&format!("\n    {i}: {op:?}"));
    }
    out
}

fn check<const IN_ORDER: bool>(cfg: &Cfg, ops: &[Op], driver: &Driver<IN_ORDER>, model: &Model) {
    let stats = driver.pool.stats();
    let table = stats.table;
    let c = &model.counts;
    let b = &model.books;
    let ledger = &driver.ledger;
    let opened = ledger.opened.load(Ordering::SeqCst);
    let closed = ledger.closed.load(Ordering::SeqCst);
    let rows: [(&str, u64, u64); 29] = [
        (
            "table.slots - table.empty (live streams)",
            (table.slots - table.empty) as u64,
            model.live() as u64,
        ),
        (
            "table.starting",
            table.starting as u64,
            model.phase_count(Phase::Starting) as u64,
        ),
        (
            "table.ready",
            table.ready as u64,
            model.phase_count(Phase::Ready) as u64,
        ),
        (
            "table.draining",
            table.draining as u64,
            model.phase_count(Phase::Draining) as u64,
        ),
        ("table.in_flight", table.in_flight, model.in_flight()),
        (
            "table.waiting",
            table.waiting as u64,
            u64::from(model.waiter.is_some()),
        ),
        ("acquires", stats.acquires, c.acquires),
        ("waits", stats.waits, c.waits),
        ("wait_time", nanos(stats.wait_time), c.wait_time),
        ("completed", stats.completed, c.completed),
        ("failed", stats.failed, c.failed),
        ("cancelled", stats.cancelled, c.cancelled),
        ("spin_ups", stats.spin_ups, c.spin_ups),
        (
            "connect_failures",
            stats.connect_failures,
            c.connect_failures,
        ),
        ("stream_failures", stats.stream_failures, c.stream_failures),
        ("panics", stats.panics, c.panics),
        ("open_timeouts", stats.open_timeouts, c.open_timeouts),
        ("stalls", stats.stalls, c.stalls),
        ("reaps", stats.reaps, c.reaps),
        ("late_responses", stats.late_responses, c.late_responses),
        (
            "unknown_responses",
            stats.unknown_responses,
            c.unknown_responses,
        ),
        (
            "breaker_rejections",
            stats.breaker_rejections,
            c.breaker_rejections,
        ),
        (
            "breaker (0 closed, 1 open, 2 half-open)",
            breaker_code(stats.breaker),
            breaker_code(model.breaker.state()),
        ),
        (
            "is_closed",
            u64::from(driver.pool.is_closed()),
            u64::from(model.closed),
        ),
        (
            "connector: connect calls",
            ledger.connects.load(Ordering::SeqCst),
            b.connects,
        ),
        ("connector: streams opened", opened, b.opened),
        ("connector: streams closed", closed, b.closed),
        (
            "connector: streams alive",
            opened.wrapping_sub(closed),
            b.opened - b.closed,
        ),
        (
            "connector: streams alive = ready streams",
            opened.wrapping_sub(closed),
            model.phase_count(Phase::Ready) as u64,
        ),
    ];
    let diffs: Vec<String> = rows
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(name, got, want)| format!("  {name}: pool {got}, model {want}"))
        .collect();
    if !diffs.is_empty() {
        panic!(
            "{}\n{}\n{stats:?}\n{}",
            trail(cfg, ops),
            diffs.join("\n"),
            model.dump()
        );
    }
    #[cfg(feature = "metrics")]
    if let Some(what) = exported_mismatch(driver, model) {
        panic!("{}\n  {what}\n{}", trail(cfg, ops), model.dump());
    }
    for h in 0..HOLDERS {
        let got = driver.holders[h].as_ref().map(|held| match held {
            DHeld::Guard(guard) => Held::Guard(guard.stream_index().expect("a guard's stream")),
            DHeld::Sending(..) => Held::Sending,
            DHeld::Waiting(..) => Held::Waiting,
        });
        let want = model.holders[h].map(|held| match held {
            MHeld::Guard(s) => Held::Guard(s),
            MHeld::Sending => Held::Sending,
            MHeld::Waiting => Held::Waiting,
        });
        if got != want {
            panic!(
                "{}\n  holder {h}: pool {got:?}, model {want:?}\n{}",
                trail(cfg, ops),
                model.dump()
            );
        }
    }
    let peers = driver.ledger.peers.lock().unwrap();
    let top = peers.keys().copied().max().map_or(0, |s| s + 1);
    for s in 0..top.max(model.slots.len()) {
        let got: Option<Vec<u64>> = peers
            .get(&s)
            .filter(|peer| peer.alive())
            .map(|peer| peer.unanswered.iter().map(|r| r.body).collect());
        for request in peers.get(&s).map_or(&[][..], |peer| &peer.unanswered[..]) {
            // By id every request on the wire carries one; in order "nothing is read from or
            // written to the messages" (a supplied id stays, none is set).
            let fine = if IN_ORDER {
                request.id.is_none_or(|id| SUPPLIED_IDS.contains(&id))
            } else {
                request.id.is_some()
            };
            assert!(
                fine,
                "{}\n  peer of slot {s} received {request:?}",
                trail(cfg, ops)
            );
        }
        let want = model
            .slots
            .get(s)
            .filter(|slot| slot.phase == Phase::Ready)
            .map(|slot| slot.peer.clone());
        if got != want {
            panic!(
                "{}\n  peer of slot {s} (requests received, unanswered): pool {got:?}, model {want:?}\n{}",
                trail(cfg, ops),
                model.dump()
            );
        }
    }
}

fn breaker_code(state: BreakerState) -> u64 {
    match state {
        BreakerState::Closed => 0,
        BreakerState::Open => 1,
        BreakerState::HalfOpen => 2,
        _ => 3,
    }
}
