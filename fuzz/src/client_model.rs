//! Differential driver for `slotpool::client::ClientPool` over `slotpool::channel::ChannelPool`:
//! decodes a configuration of the two nested pools and a sequence of operations from bytes,
//! runs each operation on real pools single-threaded (a current-thread tokio runtime with a
//! paused clock, one mock clock for both pools, a scripted channel connector and client
//! factory) and on a plain sequential model, and panics on the first difference in an outcome
//! (the error's variant, and that a retry is safe), in either pool's `stats()`, in a guard the
//! driver holds (its client, slot and channel), in the scripted user code's own books
//! (channels connected and closed, clients made and dropped, the calls), or (with the
//! `metrics` feature) in what the two pools export.
//!
//! # The model
//!
//! Written from the two pools' documentation (the module docs of `client` and `channel`, the
//! builders, `ClientPool::acquire` and its siblings, `ClientGuard::discard`, `ClientStats`,
//! `ChannelStats`, `ChannelGuard`, `docs/design.md`, `docs/pinned.md`), not from their code.
//! What it models, by the docs' words:
//!
//! * Channels: a `get` "counts as one client on the lowest-numbered channel with room, or on
//!   a new channel when every channel is full"; a new channel is connected lazily with its
//!   slot index as its id, in the lowest free slot (a slot whose connect panicked is
//!   "abandoned (reused by the next get)"). A connector panic is `ChannelError::Panicked`,
//!   counted in `panics`. A release stamps the channel's last use (the stamp "only grows");
//!   `ChannelPool::reap(now)` closes every channel with no clients idle for at least the idle
//!   timeout (counted in `reaps`). A release "as broken" marks the channel: it closes "as soon
//!   as no client is on it, by the release that leaves it empty" (counted in `broken`, not in
//!   `reaps`); clients on it keep it and new ones may join it; the mark stays.
//! * Clients: `acquire` "hands out an idle client if there is one" (the lowest slot first),
//!   "else builds a new one" in the lowest free slot, on a channel from the channel pool;
//!   with `max_clients` live clients (idle, in use or being built) it waits (FIFO),
//!   `try_acquire` answers `NoCapacity`, `acquire_timeout` waits until its deadline, which
//!   covers the build too ("a client being built is dropped with its slot"). A failed build
//!   (the factory's error: `Make`; its panic, in `make` or its future: `Panicked`; the
//!   connector's panic: `Channel`) frees the slot and the channel share first and counts in
//!   `make_failures`.
//! * Returns: a guard's drop puts the client back idle, its idle time counted from the
//!   release (no background reaper: "its returns read the clock"); to a waiter, the client
//!   goes to the waiter. To a closed pool, the client is dropped (`discards`).
//!   `ClientGuard::discard` drops the client (`discards`) and releases its channel as broken.
//! * `ClientPool::reap(now)`: closes every client idle for at least the idle timeout
//!   (`reaps`) and releases its channel share with the client's idle-since time, so a channel
//!   reap at the same instant closes the channels they leave idle (nested reaping; the
//!   `ReapBoth` op).
//! * `close`: later acquires get `Closed`, idle clients are dropped now (their channel shares
//!   released now), clients in use when their guards come back.
//! * The held-too-long watch: a reap pass counts (`held_too_long`) every hold that began at
//!   least the threshold ago and was not reported yet; a hold's length adds to `hold_time`
//!   when its client comes back.
//! * A client's destructor that panics is contained wherever the pool drops a client.
//! * Every counter of both pools' stats, and the user code's books.
//! * Metrics (with the `metrics` feature): both pools' `stats()` exported through
//!   `slotpool::metrics` after every op, each `slotpool_client_*` and `slotpool_channel_*`
//!   gauge and counter of the metrics table against the model's value for it
//!   (`slotpool_client_capacity` only for a bounded pool, `wait_nanoseconds` zero, as
//!   `wait_time`; the held-too-long counter and `hold_nanoseconds` as the watch counts them),
//!   and one `slotpool_client_wait_seconds` sample per wait (the model's `waits`).
//!
//! Not modelled: the background reapers (`reap_interval(None)` on both pools: reaping is by
//! hand, and the held-too-long watch looks only in those passes), concurrent callers beyond
//! one waiter at a time, `wait_time` (always zero: waits run on tokio's clock, the pools
//! measure them on the mock), `Timeout`'s `waited`, dropping the pool handles, the wait
//! samples' values.
//!
//! Where the docs leave a choice open, the model takes one and says so at the spot
//! ("Choice:").
//!
//! Shared by the `client_ops` fuzz target and by `cargo test` (`core/tests/
//! client_fuzz_replay.rs` includes this file with `#[path]`; it refers to the byte reader as
//! `crate::bytes`, which both crates provide at their root).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use slotpool::channel::{ChannelConnector, ChannelError, ChannelGuard, ChannelPool};
use slotpool::client::{ClientError, ClientFactory, ClientGuard, ClientPool};

use crate::bytes::Bytes;

/// Client guards the ops choose from.
const HOLDERS: usize = 6;
/// Channel guards the ops hold directly (beside the clients' own).
const CHANNEL_HOLDERS: usize = 3;
/// Longest op sequence decoded from one input.
const MAX_OPS: usize = 400;
/// One step of the mock clock: idle timeouts and the held-too-long threshold are whole
/// steps, so an `Advance` lands exactly on their boundaries.
const STEP: Duration = Duration::from_secs(1);
/// `acquire_timeout` deadlines (tokio's paused clock, milliseconds): 3 mod 10.
const TIMEOUTS: [u64; 4] = [13, 33, 53, 73];
/// How long a hanging `make` takes: 5 mod 10 ms, never a deadline's instant.
const HANGS: [u64; 6] = [5, 15, 25, 35, 45, 55];
/// How long an acquire may run (tokio's clock) before the driver gives up on it: one that
/// waits with no deadline would wait for ever.
const WATCHDOG: Duration = Duration::from_secs(100);
/// Scripted acts queued at most (per kind).
const MAX_SCRIPT: usize = 8;

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

/// Marks the panics this driver injects (which the pools must contain).
const INJECTED: &str = "injected by client_ops";

/// What the next `make` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MakeAct {
    Ok,
    Fail,
    /// Panics when `make` is called.
    PanicCall,
    /// Panics when the future `make` returned is polled.
    PanicPoll,
    /// Succeeds after this many milliseconds of tokio's clock.
    Hang(u64),
}

/// What the user code saw and did, and its scripts.
#[derive(Debug, Default)]
struct Ledger {
    connects: AtomicU64,
    channels_opened: AtomicU64,
    channels_closed: AtomicU64,
    make_calls: AtomicU64,
    made: AtomicU64,
    dropped: AtomicU64,
    /// Whether each of the next connects panics.
    connect_script: Mutex<VecDeque<bool>>,
    make_script: Mutex<VecDeque<MakeAct>>,
}

/// A channel: its id (the slot index the pool gave `connect_lazy`). The pool clones the handle
/// as it likes; the last clone's drop is the channel's close.
#[derive(Debug)]
pub struct Chan {
    id: u64,
    ledger: Arc<Ledger>,
}

impl Drop for Chan {
    fn drop(&mut self) {
        self.ledger.channels_closed.fetch_add(1, Ordering::SeqCst);
    }
}

/// The scripted channel connector.
#[derive(Debug)]
pub struct Connector {
    ledger: Arc<Ledger>,
}

impl ChannelConnector for Connector {
    type Channel = Arc<Chan>;

    fn connect_lazy(&self, id: u64) -> Arc<Chan> {
        self.ledger.connects.fetch_add(1, Ordering::SeqCst);
        let panics = self.ledger.connect_script.lock().unwrap().pop_front();
        if panics == Some(true) {
            panic!("{INJECTED}");
        }
        self.ledger.channels_opened.fetch_add(1, Ordering::SeqCst);
        Arc::new(Chan {
            id,
            ledger: Arc::clone(&self.ledger),
        })
    }
}

/// A client: its id, the channel it was built on, and whether its destructor panics.
#[derive(Debug)]
pub struct Client {
    id: u64,
    channel: u64,
    panic_drop: bool,
    ledger: Arc<Ledger>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.ledger.dropped.fetch_add(1, Ordering::SeqCst);
        if self.panic_drop {
            panic!("{INJECTED}");
        }
    }
}

/// The scripted client factory.
#[derive(Debug)]
pub struct Factory {
    ledger: Arc<Ledger>,
}

/// Panics (when polled) with the injected message, or returns `value`.
async fn ready_or_panic<T>(value: Option<T>) -> T {
    match value {
        Some(value) => value,
        None => panic!("{INJECTED}"),
    }
}

impl Ledger {
    fn client(self: &Arc<Self>, channel: u64) -> Client {
        Client {
            id: self.made.fetch_add(1, Ordering::SeqCst),
            channel,
            panic_drop: false,
            ledger: Arc::clone(self),
        }
    }
}

impl ClientFactory<Arc<Chan>> for Factory {
    type Client = Client;
    type Error = FuzzError;

    fn make(&self, channel: &Arc<Chan>) -> impl Future<Output = Result<Client, FuzzError>> + Send {
        let ledger = Arc::clone(&self.ledger);
        ledger.make_calls.fetch_add(1, Ordering::SeqCst);
        let act = ledger.make_script.lock().unwrap().pop_front();
        let act = act.unwrap_or(MakeAct::Ok);
        if act == MakeAct::PanicCall {
            panic!("{INJECTED}");
        }
        let channel = channel.id;
        async move {
            match act {
                MakeAct::Ok | MakeAct::PanicCall => Ok(ledger.client(channel)),
                MakeAct::Fail => Err(FuzzError),
                MakeAct::PanicPoll => ready_or_panic(None).await,
                MakeAct::Hang(ms) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(ledger.client(channel))
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The configuration and the ops.

#[derive(Debug, Clone, Copy)]
struct Cfg {
    per_channel: usize,
    max_clients: Option<usize>,
    /// Steps.
    client_idle: u64,
    /// Steps.
    channel_idle: u64,
    /// Steps.
    held_too_long: Option<u64>,
}

impl Cfg {
    fn decode(bytes: &mut Bytes<'_>) -> Self {
        let per_channel = 1 + bytes.below(3);
        let b = bytes.byte();
        let max_clients = match b % 3 {
            0 => None,
            _ => Some(1 + usize::from(b / 3) % 4),
        };
        let b = bytes.byte();
        let client_idle = 1 + u64::from(b % 4);
        let channel_idle = 1 + u64::from((b / 4) % 4);
        let held_too_long = ((b / 16) % 2 == 1).then_some(1 + u64::from(b / 32) % 3);
        Cfg {
            per_channel,
            max_clients,
            client_idle,
            channel_idle,
            held_too_long,
        }
    }

    fn build(&self, ledger: &Arc<Ledger>, clock: &slotpool::Clock) -> Arc<Clients> {
        let connector = Connector {
            ledger: Arc::clone(ledger),
        };
        let channels = ChannelPool::builder(connector)
            .max_clients_per_channel(self.per_channel)
            .idle_timeout(STEP * self.channel_idle as u32)
            .reap_interval(None)
            .clock(clock.clone())
            .build();
        let channels = match channels {
            Ok(channels) => channels,
            Err(error) => panic!("valid configuration {self:?} refused: {error}"),
        };
        let factory = Factory {
            ledger: Arc::clone(ledger),
        };
        let clients = ClientPool::builder(channels, factory)
            .max_clients(self.max_clients)
            .idle_timeout(STEP * self.client_idle as u32)
            .held_too_long(self.held_too_long.map(|steps| STEP * steps as u32))
            .reap_interval(None)
            .clock(clock.clone())
            .build();
        match clients {
            Ok(clients) => clients,
            Err(error) => panic!("valid configuration {self:?} refused: {error}"),
        }
    }
}

type Clients = ClientPool<Connector, Factory>;
type Guard = ClientGuard<Connector, Factory>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `acquire`: waits for ever (the driver's watchdog ends it).
    Acquire,
    /// `try_acquire`: never waits.
    Try,
    /// `acquire_timeout(ms)`.
    Within(u64),
}

/// How a holder's client comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Back {
    /// The guard is dropped.
    Return,
    /// `ClientGuard::discard`.
    Discard,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire(Kind),
    /// An acquire that, at its first suspension (or when it ends, if it never suspends), sees
    /// holder `h`'s client come back.
    AcquireWhile(Kind, usize, Back),
    Back(usize, Back),
    /// Holder `h`'s client panics in its destructor from now on.
    PanicOnDrop(usize),
    ScriptMake(MakeAct),
    /// Whether the next connect panics.
    ScriptConnect(bool),
    Advance(u32),
    ReapClients,
    ReapChannels,
    /// A client reap, then a channel reap at the same instant.
    ReapBoth,
    /// `ChannelPool::get`, held by a channel holder.
    ChannelGet,
    ChannelDrop(usize),
    Close,
}

fn decode_kind(bytes: &mut Bytes<'_>) -> Kind {
    let b = bytes.byte();
    match b % 4 {
        0 | 1 => Kind::Acquire,
        2 => Kind::Try,
        _ => Kind::Within(TIMEOUTS[usize::from(b / 4) % TIMEOUTS.len()]),
    }
}

/// A holder that holds something (the byte picks among them), or holder 0 if none does.
fn decode_holder(bytes: &mut Bytes<'_>, held: &[usize]) -> usize {
    let b = usize::from(bytes.byte());
    if held.is_empty() {
        0
    } else {
        held[b % held.len()]
    }
}

fn decode_back(b: u8) -> Back {
    if b % 3 == 2 {
        Back::Discard
    } else {
        Back::Return
    }
}

/// The next op; `held`: the client holders that hold a guard now, `held_channels` the
/// channel holders that do.
fn decode(bytes: &mut Bytes<'_>, held: &[usize], held_channels: &[usize]) -> Op {
    let op = bytes.byte();
    match op % 16 {
        0..=2 => Op::Acquire(decode_kind(bytes)),
        3 => {
            let kind = decode_kind(bytes);
            let h = decode_holder(bytes, held);
            Op::AcquireWhile(kind, h, decode_back(op / 16))
        }
        4 | 5 => Op::Back(decode_holder(bytes, held), decode_back(op / 16)),
        6 => Op::PanicOnDrop(decode_holder(bytes, held)),
        7 => {
            let b = bytes.byte();
            Op::ScriptMake(match b % 8 {
                0 | 1 => MakeAct::Ok,
                2 | 3 => MakeAct::Fail,
                4 => MakeAct::PanicCall,
                5 => MakeAct::PanicPoll,
                _ => MakeAct::Hang(HANGS[usize::from(b / 8) % HANGS.len()]),
            })
        }
        8 => Op::ScriptConnect(op / 16 % 2 == 1),
        9 | 10 => Op::Advance(bytes.below(4) as u32),
        11 => Op::ReapClients,
        12 => Op::ReapChannels,
        13 => Op::ReapBoth,
        14 if op & 16 == 0 => Op::ChannelGet,
        14 => Op::ChannelDrop(decode_holder(bytes, held_channels)),
        _ if op >= 240 => Op::Close,
        _ => Op::Acquire(decode_kind(bytes)),
    }
}

// ---------------------------------------------------------------------------------------------
// Outcomes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Closed,
    NoCapacity,
    Timeout,
    Make,
    Panicked,
    /// `ClientError::Channel`.
    Channel,
    /// `ChannelError::Panicked`, from a direct `ChannelPool::get`.
    ChannelPanicked,
}

/// A client as its guard shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    id: u64,
    slot: usize,
    channel: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Got(Seen),
    /// A direct channel get: the channel's id.
    GotChannel(u64),
    Failed(Failure),
    /// The watchdog ended an acquire that would have waited for ever.
    Hung,
    /// A holder op on an empty holder, or an acquire with no free holder.
    Nothing,
    Done,
    Count(usize),
    /// A client reap's count, then a channel reap's.
    Counts(usize, usize),
}

fn failure<E: std::error::Error>(error: &ClientError<E>) -> Failure {
    match error {
        ClientError::Closed => Failure::Closed,
        ClientError::NoCapacity => Failure::NoCapacity,
        ClientError::Timeout { .. } => Failure::Timeout,
        ClientError::Make { .. } => Failure::Make,
        ClientError::Panicked(_) => Failure::Panicked,
        ClientError::Channel(_) => Failure::Channel,
        other => panic!("an error the model does not know: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone, Copy)]
struct MChan {
    /// Clients (guards) on it.
    load: usize,
    /// Its last use, nanoseconds on the mock clock.
    last_used: u64,
    /// Released as broken: closes as soon as no client is on it.
    broken: bool,
}

#[derive(Debug, Clone, Copy)]
struct MClient {
    id: u64,
    channel: usize,
}

#[derive(Debug, Clone, Copy)]
enum MSlot {
    Empty,
    /// Idle since the given time.
    Idle(MClient, u64),
    /// Held by a guard, or being built.
    Busy,
}

/// A held client: its slot, the client, and its hold (when it began, whether it was
/// reported).
#[derive(Debug, Clone, Copy)]
struct MHeld {
    slot: usize,
    client: MClient,
    since: u64,
    reported: bool,
}

/// Both pools' counters, by the model.
#[derive(Debug, Default, Clone)]
struct Counts {
    acquires: u64,
    waits: u64,
    created: u64,
    make_failures: u64,
    discards: u64,
    client_reaps: u64,
    held_too_long: u64,
    hold_time: u64,
    channel_gets: u64,
    opened: u64,
    channel_reaps: u64,
    channel_broken: u64,
    channel_panics: u64,
}

/// The user code's books, by the model.
#[derive(Debug, Default, Clone)]
struct Books {
    connects: u64,
    channels_opened: u64,
    channels_closed: u64,
    make_calls: u64,
    made: u64,
    dropped: u64,
}

#[derive(Debug, Clone)]
struct Model {
    cfg: Cfg,
    /// The mock clock, nanoseconds.
    now: u64,
    channels: Vec<Option<MChan>>,
    slots: Vec<MSlot>,
    holders: Vec<Option<MHeld>>,
    channel_holders: Vec<Option<usize>>,
    closed: bool,
    counts: Counts,
    books: Books,
    makes: VecDeque<MakeAct>,
    connects: VecDeque<bool>,
}

impl Model {
    fn new(cfg: Cfg) -> Self {
        Model {
            cfg,
            now: 0,
            channels: Vec::new(),
            slots: Vec::new(),
            holders: vec![None; HOLDERS],
            channel_holders: vec![None; CHANNEL_HOLDERS],
            closed: false,
            counts: Counts::default(),
            books: Books::default(),
            makes: VecDeque::new(),
            connects: VecDeque::new(),
        }
    }

    /// The model's state in a few lines, for a failure's message.
    fn dump(&self) -> String {
        let channels: Vec<String> = self
            .channels
            .iter()
            .map(|c| match c {
                None => "-".to_string(),
                Some(c) => format!(
                    "load {} used {}{}",
                    c.load,
                    c.last_used / nanos(STEP),
                    if c.broken { " broken" } else { "" }
                ),
            })
            .collect();
        let slots: Vec<String> = self
            .slots
            .iter()
            .map(|s| match s {
                MSlot::Empty => "-".to_string(),
                MSlot::Idle(c, since) => format!(
                    "idle #{} on {} since {}",
                    c.id,
                    c.channel,
                    since / nanos(STEP)
                ),
                MSlot::Busy => "busy".to_string(),
            })
            .collect();
        format!(
            "model: now {} steps, closed {}\n  channels [{}]\n  slots [{}]\n  holders {:?}\n  \
             channel holders {:?}\n  scripted makes {:?}, connects {:?}\n  {:?}\n  {:?}",
            self.now / nanos(STEP),
            self.closed,
            channels.join(", "),
            slots.join(", "),
            self.holders,
            self.channel_holders,
            self.makes,
            self.connects,
            self.counts,
            self.books,
        )
    }

    // --- gauges ----------------------------------------------------------------------------

    fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| !matches!(s, MSlot::Empty))
            .count()
    }

    fn idle(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, MSlot::Idle(..)))
            .count()
    }

    fn open_channels(&self) -> usize {
        self.channels.iter().flatten().count()
    }

    fn channel_clients(&self) -> u64 {
        self.channels.iter().flatten().map(|c| c.load as u64).sum()
    }

    fn room(&self) -> bool {
        self.cfg.max_clients.is_none_or(|max| self.live() < max)
    }

    fn seen(&self, held: &MHeld) -> Seen {
        Seen {
            id: held.client.id,
            slot: held.slot,
            channel: held.client.channel as u64,
        }
    }

    // --- channels --------------------------------------------------------------------------

    /// `ChannelPool::get`: a share of the lowest channel with room, or of a new one in the
    /// lowest free slot. `Err` when the connector panicked.
    fn channel_get(&mut self) -> Result<usize, ()> {
        let per = self.cfg.per_channel;
        if let Some(i) = self
            .channels
            .iter()
            .position(|c| c.is_some_and(|c| c.load < per))
        {
            if let Some(c) = self.channels[i].as_mut() {
                c.load += 1;
            }
            self.counts.channel_gets += 1;
            return Ok(i);
        }
        let i = match self.channels.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.channels.push(None);
                self.channels.len() - 1
            }
        };
        self.books.connects += 1;
        if self.connects.pop_front() == Some(true) {
            self.counts.channel_panics += 1;
            return Err(());
        }
        self.books.channels_opened += 1;
        self.counts.opened += 1;
        self.counts.channel_gets += 1;
        self.channels[i] = Some(MChan {
            load: 1,
            last_used: self.now,
            broken: false,
        });
        Ok(i)
    }

    /// A share of channel `i` released, its last use `at` (or as broken).
    fn channel_release(&mut self, i: usize, at: u64, broken: bool) {
        let Some(c) = self.channels[i].as_mut() else {
            panic!("model: a share of channel {i}, which is not open");
        };
        c.load -= 1;
        if broken {
            c.broken = true;
        } else {
            // Choice (the docs: "the stamp only grows"): a release older than the channel's
            // last use leaves it.
            c.last_used = c.last_used.max(at);
        }
        if c.load == 0 && c.broken {
            self.channels[i] = None;
            self.books.channels_closed += 1;
            self.counts.channel_broken += 1;
        }
    }

    fn reap_channels(&mut self) -> usize {
        let timeout = self.cfg.channel_idle * nanos(STEP);
        let mut closed = 0;
        for i in 0..self.channels.len() {
            let Some(c) = self.channels[i] else { continue };
            if c.load == 0 && self.now - c.last_used >= timeout {
                self.channels[i] = None;
                self.books.channels_closed += 1;
                self.counts.channel_reaps += 1;
                closed += 1;
            }
        }
        closed
    }

    // --- clients ---------------------------------------------------------------------------

    /// The pool drops a client (its destructor's panic, if any, is contained).
    fn drop_client(&mut self, _client: MClient) {
        self.books.dropped += 1;
    }

    /// A hold ends: its length adds to `hold_time` (with the watch on).
    fn end_hold(&mut self, held: &MHeld) {
        if self.cfg.held_too_long.is_some() {
            self.counts.hold_time += self.now - held.since;
        }
    }

    fn hold(&self, slot: usize, client: MClient) -> MHeld {
        MHeld {
            slot,
            client,
            since: self.now,
            reported: false,
        }
    }

    /// Holder `h`'s client comes back `how`; with `waiter`, a client that stays (or the room
    /// a dropped one frees) goes to the waiter: `Some(Ok(..))` the client handed over,
    /// `Some(Err(slot))` the room.
    fn back(&mut self, h: usize, how: Back, waiter: bool) -> Option<Result<MHeld, ()>> {
        let held = self.holders[h].take()?;
        // Choice: only a client that comes back (a guard's drop) ends its hold with a length
        // (the watch reports a hold "again when it comes back", and hold times add up then);
        // a discarded client never comes back.
        if how == Back::Return {
            self.end_hold(&held);
        }
        let MHeld { slot, client, .. } = held;
        match how {
            Back::Discard => {
                self.counts.discards += 1;
                self.drop_client(client);
                self.slots[slot] = MSlot::Empty;
                self.channel_release(client.channel, self.now, true);
                waiter.then_some(Err(()))
            }
            Back::Return if self.closed => {
                self.counts.discards += 1;
                self.drop_client(client);
                self.slots[slot] = MSlot::Empty;
                self.channel_release(client.channel, self.now, false);
                None
            }
            Back::Return if waiter => Some(Ok(self.hold(slot, client))),
            Back::Return => {
                self.slots[slot] = MSlot::Idle(client, self.now);
                None
            }
        }
    }

    /// The lowest slot with an idle client.
    fn lowest_idle(&self) -> Option<usize> {
        self.slots.iter().position(|s| matches!(s, MSlot::Idle(..)))
    }

    /// Claims the lowest empty slot for a build.
    fn claim(&mut self) -> usize {
        match self.slots.iter().position(|s| matches!(s, MSlot::Empty)) {
            Some(slot) => {
                self.slots[slot] = MSlot::Busy;
                slot
            }
            None => {
                self.slots.push(MSlot::Busy);
                self.slots.len() - 1
            }
        }
    }

    /// Runs the come-back of an acquire's holder at its first suspension, if not yet run (no
    /// waiter).
    fn suspend(&mut self, ret: &mut Option<(usize, Back)>) {
        if let Some((h, how)) = ret.take() {
            self.back(h, how, false);
        }
    }

    fn acquire(&mut self, kind: Kind, mut ret: Option<(usize, Back)>) -> Outcome {
        let result = self.acquire_inner(kind, &mut ret);
        // An acquire that never suspended sees the client come back after it.
        self.suspend(&mut ret);
        match result {
            Ok(held) => {
                let seen = self.seen(&held);
                let Some(h) = self.holders.iter().position(Option::is_none) else {
                    panic!("model: no free holder for the client served");
                };
                self.holders[h] = Some(held);
                Outcome::Got(seen)
            }
            Err(outcome) => outcome,
        }
    }

    fn acquire_inner(
        &mut self,
        kind: Kind,
        ret: &mut Option<(usize, Back)>,
    ) -> Result<MHeld, Outcome> {
        if self.closed {
            return Err(Outcome::Failed(Failure::Closed));
        }
        if let Some(slot) = self.lowest_idle() {
            let MSlot::Idle(client, _) = std::mem::replace(&mut self.slots[slot], MSlot::Busy)
            else {
                unreachable!()
            };
            self.counts.acquires += 1;
            return Ok(self.hold(slot, client));
        }
        if self.room() {
            let slot = self.claim();
            return self.build(slot, kind, ret);
        }
        if kind == Kind::Try {
            return Err(Outcome::Failed(Failure::NoCapacity));
        }
        // Full: wait for a client (or room) to come back.
        self.counts.waits += 1;
        let Some((h, how)) = ret.take() else {
            return Err(match kind {
                Kind::Within(_) => Outcome::Failed(Failure::Timeout),
                _ => Outcome::Hung,
            });
        };
        match self.back(h, how, true) {
            Some(Ok(held)) => {
                self.counts.acquires += 1;
                Ok(held)
            }
            Some(Err(())) => {
                let slot = self.claim();
                self.build(slot, kind, ret)
            }
            None => Err(match kind {
                Kind::Within(_) => Outcome::Failed(Failure::Timeout),
                _ => Outcome::Hung,
            }),
        }
    }

    /// Builds a client in the claimed `slot` (the acquire has not waited: every wait here ends
    /// at once or not at all).
    fn build(
        &mut self,
        slot: usize,
        kind: Kind,
        ret: &mut Option<(usize, Back)>,
    ) -> Result<MHeld, Outcome> {
        let channel = match self.channel_get() {
            Ok(channel) => channel,
            Err(()) => {
                self.slots[slot] = MSlot::Empty;
                self.counts.make_failures += 1;
                return Err(Outcome::Failed(Failure::Channel));
            }
        };
        self.books.make_calls += 1;
        let act = self.makes.pop_front().unwrap_or(MakeAct::Ok);
        let failed = match act {
            MakeAct::Ok => None,
            MakeAct::Fail => Some(Failure::Make),
            MakeAct::PanicCall | MakeAct::PanicPoll => Some(Failure::Panicked),
            MakeAct::Hang(ms) => {
                self.suspend(ret);
                match kind {
                    Kind::Within(deadline) if ms > deadline => {
                        // Cut short: the half-built client's share and slot are freed.
                        // Choice: not a failed build (`make_failures` names the factory's
                        // errors and panics and the connector's).
                        self.slots[slot] = MSlot::Empty;
                        self.channel_release(channel, self.now, false);
                        return Err(Outcome::Failed(Failure::Timeout));
                    }
                    _ => None,
                }
            }
        };
        if let Some(failure) = failed {
            self.slots[slot] = MSlot::Empty;
            self.channel_release(channel, self.now, false);
            self.counts.make_failures += 1;
            return Err(Outcome::Failed(failure));
        }
        let id = self.books.made;
        self.books.made += 1;
        self.counts.created += 1;
        self.counts.acquires += 1;
        let client = MClient { id, channel };
        Ok(self.hold(slot, client))
    }

    /// `ClientPool::reap` at the model's now.
    fn reap_clients(&mut self) -> usize {
        let timeout = self.cfg.client_idle * nanos(STEP);
        let mut closed = 0;
        for slot in 0..self.slots.len() {
            let MSlot::Idle(client, since) = self.slots[slot] else {
                continue;
            };
            if self.now - since >= timeout {
                self.slots[slot] = MSlot::Empty;
                self.drop_client(client);
                self.counts.client_reaps += 1;
                self.channel_release(client.channel, since, false);
                closed += 1;
            }
        }
        if let Some(steps) = self.cfg.held_too_long {
            let threshold = steps * nanos(STEP);
            for held in self.holders.iter_mut().flatten() {
                if !held.reported && self.now - held.since >= threshold {
                    held.reported = true;
                    self.counts.held_too_long += 1;
                }
            }
        }
        closed
    }

    fn close(&mut self) {
        self.closed = true;
        for slot in 0..self.slots.len() {
            if let MSlot::Idle(client, _) = self.slots[slot] {
                self.slots[slot] = MSlot::Empty;
                self.drop_client(client);
                // Choice: idle clients the close drops count in `discards` (the docs name a
                // guard's discard and a return to a closed pool; these are dropped for the
                // close as those returned to it are).
                self.counts.discards += 1;
                self.channel_release(client.channel, self.now, false);
            }
        }
    }

    fn apply(&mut self, op: Op) -> Outcome {
        match op {
            Op::Acquire(kind) => {
                if self.holders.iter().all(Option::is_some) {
                    return Outcome::Nothing;
                }
                self.acquire(kind, None)
            }
            Op::AcquireWhile(kind, h, how) => self.acquire(kind, Some((h, how))),
            Op::Back(h, how) => match self.holders[h] {
                Some(_) => {
                    self.back(h, how, false);
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            // The destructor's panic is contained wherever the pool drops the client: the model
            // sees no difference.
            Op::PanicOnDrop(h) => match self.holders[h] {
                Some(_) => Outcome::Done,
                None => Outcome::Nothing,
            },
            Op::ScriptMake(act) => {
                if self.makes.len() < MAX_SCRIPT {
                    self.makes.push_back(act);
                }
                Outcome::Done
            }
            Op::ScriptConnect(panics) => {
                if self.connects.len() < MAX_SCRIPT {
                    self.connects.push_back(panics);
                }
                Outcome::Done
            }
            Op::Advance(steps) => {
                self.now += u64::from(steps) * nanos(STEP);
                Outcome::Done
            }
            Op::ReapClients => Outcome::Count(self.reap_clients()),
            Op::ReapChannels => Outcome::Count(self.reap_channels()),
            Op::ReapBoth => {
                let clients = self.reap_clients();
                Outcome::Counts(clients, self.reap_channels())
            }
            Op::ChannelGet => {
                let Some(hc) = self.channel_holders.iter().position(Option::is_none) else {
                    return Outcome::Nothing;
                };
                match self.channel_get() {
                    Ok(i) => {
                        self.channel_holders[hc] = Some(i);
                        Outcome::GotChannel(i as u64)
                    }
                    Err(()) => Outcome::Failed(Failure::ChannelPanicked),
                }
            }
            Op::ChannelDrop(hc) => match self.channel_holders[hc].take() {
                Some(i) => {
                    self.channel_release(i, self.now, false);
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            Op::Close => {
                self.close();
                Outcome::Done
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The driver.

type AcquireFuture<'a> = Pin<Box<dyn Future<Output = Result<Guard, ClientError<FuzzError>>> + 'a>>;

fn acquire_future(pool: &Arc<Clients>, kind: Kind) -> AcquireFuture<'_> {
    match kind {
        Kind::Acquire => Box::pin(pool.acquire()),
        Kind::Try => Box::pin(pool.try_acquire()),
        Kind::Within(ms) => Box::pin(pool.acquire_timeout(Duration::from_millis(ms))),
    }
}

/// The pools, the runtime and clock, what the driver holds, and the user code's books.
struct Driver {
    runtime: tokio::runtime::Runtime,
    mock: slotpool::MockClock,
    clients: Arc<Clients>,
    ledger: Arc<Ledger>,
    holders: Vec<Option<Guard>>,
    channel_holders: Vec<Option<ChannelGuard<Connector>>>,
    /// What the pools exported: this thread's recorder for the whole run (each wait's sample
    /// as it ends), and each check exports both pools' `stats()` under it.
    #[cfg(feature = "metrics")]
    exported: Arc<crate::capture::Capture>,
}

fn seen_guard(guard: &Guard) -> Seen {
    let client: &Client = guard;
    assert_eq!(
        client.channel,
        guard.channel_id(),
        "a client reports the channel it was built on"
    );
    Seen {
        id: client.id,
        slot: guard.slot(),
        channel: guard.channel_id(),
    }
}

fn come_back(guard: Guard, how: Back) {
    match how {
        Back::Return => drop(guard),
        Back::Discard => guard.discard(),
    }
}

impl Driver {
    fn now(&self) -> slotpool::Instant {
        self.clients.channels().clock().now()
    }

    fn acquire(&mut self, kind: Kind, ret: Option<(usize, Back)>) -> Outcome {
        let returning = ret.and_then(|(h, how)| self.holders[h].take().map(|g| (g, how)));
        let pool = &self.clients;
        let result = self.runtime.block_on(async move {
            let mut acquire =
                std::pin::pin!(tokio::time::timeout(WATCHDOG, acquire_future(pool, kind)));
            let first = std::future::poll_fn(|cx| Poll::Ready(acquire.as_mut().poll(cx))).await;
            match first {
                Poll::Ready(result) => {
                    if let Some((guard, how)) = returning {
                        come_back(guard, how);
                    }
                    result
                }
                Poll::Pending => {
                    if let Some((guard, how)) = returning {
                        come_back(guard, how);
                    }
                    acquire.await
                }
            }
        });
        match result {
            Err(_) => Outcome::Hung,
            Ok(Ok(guard)) => {
                let seen = seen_guard(&guard);
                let Some(h) = self.holders.iter().position(Option::is_none) else {
                    panic!("no free holder for the client served");
                };
                self.holders[h] = Some(guard);
                Outcome::Got(seen)
            }
            Ok(Err(error)) => {
                assert!(
                    error.reach().retry_is_safe(),
                    "{error:?}: every ClientError is NotSent"
                );
                if let ClientError::Channel(inner) = &error {
                    assert!(inner.reach().retry_is_safe(), "{inner:?} is NotSent");
                }
                Outcome::Failed(failure(&error))
            }
        }
    }

    fn apply(&mut self, op: Op) -> Outcome {
        match op {
            Op::Acquire(kind) => {
                if self.holders.iter().all(Option::is_some) {
                    return Outcome::Nothing;
                }
                self.acquire(kind, None)
            }
            Op::AcquireWhile(kind, h, how) => self.acquire(kind, Some((h, how))),
            Op::Back(h, how) => match self.holders[h].take() {
                Some(guard) => {
                    come_back(guard, how);
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            Op::PanicOnDrop(h) => match self.holders[h].as_mut() {
                Some(guard) => {
                    let client: &mut Client = guard;
                    client.panic_drop = true;
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            Op::ScriptMake(act) => {
                let mut script = self.ledger.make_script.lock().unwrap();
                if script.len() < MAX_SCRIPT {
                    script.push_back(act);
                }
                Outcome::Done
            }
            Op::ScriptConnect(panics) => {
                let mut script = self.ledger.connect_script.lock().unwrap();
                if script.len() < MAX_SCRIPT {
                    script.push_back(panics);
                }
                Outcome::Done
            }
            Op::Advance(steps) => {
                self.mock.advance(STEP * steps);
                Outcome::Done
            }
            Op::ReapClients => Outcome::Count(self.clients.reap(self.now())),
            Op::ReapChannels => Outcome::Count(self.clients.channels().reap(self.now())),
            Op::ReapBoth => {
                let now = self.now();
                let clients = self.clients.reap(now);
                Outcome::Counts(clients, self.clients.channels().reap(now))
            }
            Op::ChannelGet => {
                let Some(hc) = self.channel_holders.iter().position(Option::is_none) else {
                    return Outcome::Nothing;
                };
                match self.clients.channels().get() {
                    Ok(guard) => {
                        let id = guard.id();
                        assert_eq!(guard.channel().id, id, "a channel's id is its slot");
                        self.channel_holders[hc] = Some(guard);
                        Outcome::GotChannel(id)
                    }
                    Err(error) => {
                        assert!(error.reach().retry_is_safe(), "{error:?} is NotSent");
                        let ChannelError::Panicked(_) = error else {
                            panic!("the channel pool is never closed here: {error:?}");
                        };
                        Outcome::Failed(Failure::ChannelPanicked)
                    }
                }
            }
            Op::ChannelDrop(hc) => match self.channel_holders[hc].take() {
                Some(guard) => {
                    drop(guard);
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            Op::Close => {
                self.clients.close();
                Outcome::Done
            }
        }
    }
}

/// Runs one op sequence; panics on the first divergence between the pools and the model.
pub fn run(data: &[u8]) {
    crate::injected::pass_injected_panics();
    let mut bytes = Bytes::new(data);
    let cfg = Cfg::decode(&mut bytes);
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    else {
        return;
    };
    let ledger = Arc::new(Ledger::default());
    let (clock, mock) = slotpool::Clock::mock();
    // The client pool records each wait through the recorder current when the wait ends (a
    // lookup by name each time), so the capture is this thread's recorder for the whole run.
    #[cfg(feature = "metrics")]
    let exported = Arc::new(crate::capture::Capture::default());
    #[cfg(feature = "metrics")]
    let _recorder = metrics::set_default_local_recorder(&*exported);
    let clients = cfg.build(&ledger, &clock);
    let mut driver = Driver {
        runtime,
        mock,
        clients,
        ledger,
        holders: (0..HOLDERS).map(|_| None).collect(),
        channel_holders: (0..CHANNEL_HOLDERS).map(|_| None).collect(),
        #[cfg(feature = "metrics")]
        exported: Arc::clone(&exported),
    };
    let mut model = Model::new(cfg);
    let mut ops: Vec<Op> = Vec::new();
    // `CLIENT_MODEL_TRACE=1` prints every op, its outcome and the model after it.
    let trace = std::env::var_os("CLIENT_MODEL_TRACE").is_some();
    check(&cfg, &ops, &driver, &model);

    while ops.len() < MAX_OPS && !bytes.is_empty() {
        let held: Vec<usize> = (0..HOLDERS)
            .filter(|&h| model.holders[h].is_some())
            .collect();
        let held_channels: Vec<usize> = (0..CHANNEL_HOLDERS)
            .filter(|&h| model.channel_holders[h].is_some())
            .collect();
        let op = decode(&mut bytes, &held, &held_channels);
        ops.push(op);
        let want = model.apply(op);
        let got = driver.apply(op);
        if trace {
            eprintln!("{}: {op:?} -> {got:?}\n{}", ops.len() - 1, model.dump());
        }
        if got != want {
            panic!(
                "{}\n  pool:  {got:?}\n  model: {want:?}\n{}",
                trail(&cfg, &ops),
                model.dump()
            );
        }
        check(&cfg, &ops, &driver, &model);
    }

    // The end: close, everything held comes back, every channel idles out; every client and
    // every channel is dropped exactly once.
    for op in [Op::Close]
        .into_iter()
        .chain((0..HOLDERS).map(|h| Op::Back(h, Back::Return)))
        .chain((0..CHANNEL_HOLDERS).map(Op::ChannelDrop))
        .chain([Op::Advance(3), Op::Advance(3), Op::ReapChannels])
    {
        ops.push(op);
        let want = model.apply(op);
        let got = driver.apply(op);
        assert_eq!(got, want, "{}\n{}", trail(&cfg, &ops), model.dump());
        check(&cfg, &ops, &driver, &model);
    }
    let ledger = &driver.ledger;
    assert_eq!(
        ledger.made.load(Ordering::SeqCst),
        ledger.dropped.load(Ordering::SeqCst),
        "{}: after close every client is dropped",
        trail(&cfg, &ops)
    );
    assert_eq!(
        ledger.channels_opened.load(Ordering::SeqCst),
        ledger.channels_closed.load(Ordering::SeqCst),
        "{}: every channel idles out and is closed",
        trail(&cfg, &ops)
    );
}

/// The `pool` label the driver exports both pools' `stats()` under (the client pool has no
/// `name`, so its wait histogram is labelled `pool = "default"`).
#[cfg(feature = "metrics")]
const EXPORTED_AS: &str = "fuzz";

/// What the two pools' `stats()` export (`slotpool::metrics::Export`, under the driver's
/// capture), against the model: the client pool's gauges (`capacity` only for a bounded pool:
/// never exported for an unbounded one) and every counter (`wait_nanoseconds` is the model's
/// zero `wait_time`; `held_too_long` and `hold_nanoseconds` as the model's watch counts them,
/// zero with the watch off), the samples of `slotpool_client_wait_seconds` (one per wait that
/// ended: the model's `waits`, every acquire of the driver having ended before a check), and
/// the channel pool's two gauges and five counters. The first metric that differs, described.
#[cfg(feature = "metrics")]
fn exported_mismatch(cfg: &Cfg, driver: &Driver, model: &Model) -> Option<String> {
    use slotpool::metrics::Export;
    let exported = &driver.exported;
    metrics::with_local_recorder(&**exported, || {
        driver.clients.stats().export(EXPORTED_AS);
        driver.clients.channels().stats().export(EXPORTED_AS);
    });
    let metric = format!("slotpool_client_capacity{{pool={EXPORTED_AS}}}");
    match (cfg.max_clients, exported.get(&metric)) {
        (None, None) => {}
        (None, Some(_)) => {
            return Some(format!(
                "exported {metric} for an unbounded pool: {}",
                exported.gauge(&metric)
            ))
        }
        (Some(want), _) => {
            let got = exported.gauge(&metric);
            if got != want as f64 {
                return Some(format!("exported {metric}: pool {got}, model {want}"));
            }
        }
    }
    let live = model.live();
    let idle = model.idle();
    let gauges = [
        ("client_clients", live as u64),
        ("client_idle", idle as u64),
        ("client_in_use", (live - idle) as u64),
        ("client_waiting", 0),
        ("channel_channels", model.open_channels() as u64),
        ("channel_clients", model.channel_clients()),
    ];
    for (name, want) in gauges {
        let metric = format!("slotpool_{name}{{pool={EXPORTED_AS}}}");
        let got = exported.gauge(&metric);
        if got != want as f64 {
            return Some(format!("exported {metric}: pool {got}, model {want}"));
        }
    }
    let c = &model.counts;
    let counters = [
        ("client_acquires", c.acquires),
        ("client_waits", c.waits),
        ("client_wait_nanoseconds", 0),
        ("client_created", c.created),
        ("client_make_failures", c.make_failures),
        ("client_discards", c.discards),
        ("client_reaps", c.client_reaps),
        ("client_held_too_long", c.held_too_long),
        ("client_hold_nanoseconds", c.hold_time),
        ("channel_gets", c.channel_gets),
        ("channel_opened", c.opened),
        ("channel_reaps", c.channel_reaps),
        ("channel_broken", c.channel_broken),
        ("channel_panics", c.channel_panics),
    ];
    for (name, want) in counters {
        let metric = format!("slotpool_{name}_total{{pool={EXPORTED_AS}}}");
        let got = exported.counter(&metric);
        if got != want {
            return Some(format!("exported {metric}: pool {got}, model {want}"));
        }
    }
    let metric = "slotpool_client_wait_seconds{pool=default}";
    let got = exported.samples(metric).len() as u64;
    if got != c.waits {
        return Some(format!(
            "samples of {metric}: pool {got}, model {} (waits)",
            c.waits
        ));
    }
    None
}

/// The configuration and the ops so far, for a failure's message.
fn trail(cfg: &Cfg, ops: &[Op]) -> String {
    let last = ops.len().saturating_sub(12);
    let mut out = format!("{cfg:?}\n  after {} ops", ops.len());
    for (i, op) in ops.iter().enumerate().skip(last) {
        out.push_str(&format!("\n    {i}: {op:?}"));
    }
    out
}

fn check(cfg: &Cfg, ops: &[Op], driver: &Driver, model: &Model) {
    let stats = driver.clients.stats();
    let channel_stats = driver.clients.channels().stats();
    let c = &model.counts;
    let b = &model.books;
    let ledger = &driver.ledger;
    let live = model.live();
    let idle = model.idle();
    let rows: [(&str, u64, u64); 29] = [
        (
            "clients.capacity",
            stats.capacity.map_or(u64::MAX, |n| n as u64),
            cfg.max_clients.map_or(u64::MAX, |n| n as u64),
        ),
        ("clients.clients", stats.clients as u64, live as u64),
        ("clients.idle", stats.idle as u64, idle as u64),
        ("clients.in_use", stats.in_use as u64, (live - idle) as u64),
        ("clients.waiting", stats.waiting as u64, 0),
        ("clients.acquires", stats.acquires, c.acquires),
        ("clients.waits", stats.waits, c.waits),
        (
            "clients.wait_time (mock clock, never moved by a wait)",
            nanos(stats.wait_time),
            0,
        ),
        ("clients.created", stats.created, c.created),
        (
            "clients.make_failures",
            stats.make_failures,
            c.make_failures,
        ),
        ("clients.discards", stats.discards, c.discards),
        ("clients.reaps", stats.reaps, c.client_reaps),
        (
            "clients.held_too_long",
            stats.held_too_long,
            c.held_too_long,
        ),
        ("clients.hold_time", nanos(stats.hold_time), c.hold_time),
        (
            "channels.channels",
            channel_stats.channels as u64,
            model.open_channels() as u64,
        ),
        (
            "channels.clients",
            channel_stats.clients,
            model.channel_clients(),
        ),
        ("channels.gets", channel_stats.gets, c.channel_gets),
        ("channels.opened", channel_stats.opened, c.opened),
        ("channels.reaps", channel_stats.reaps, c.channel_reaps),
        ("channels.broken", channel_stats.broken, c.channel_broken),
        ("channels.panics", channel_stats.panics, c.channel_panics),
        (
            "connector: connect calls",
            ledger.connects.load(Ordering::SeqCst),
            b.connects,
        ),
        (
            "connector: channels opened",
            ledger.channels_opened.load(Ordering::SeqCst),
            b.channels_opened,
        ),
        (
            "connector: channels closed",
            ledger.channels_closed.load(Ordering::SeqCst),
            b.channels_closed,
        ),
        (
            "connector: channels alive",
            ledger.channels_opened.load(Ordering::SeqCst)
                - ledger.channels_closed.load(Ordering::SeqCst),
            b.channels_opened - b.channels_closed,
        ),
        (
            "factory: make calls",
            ledger.make_calls.load(Ordering::SeqCst),
            b.make_calls,
        ),
        (
            "factory: clients made",
            ledger.made.load(Ordering::SeqCst),
            b.made,
        ),
        (
            "factory: clients dropped",
            ledger.dropped.load(Ordering::SeqCst),
            b.dropped,
        ),
        (
            "factory: clients alive",
            ledger.made.load(Ordering::SeqCst) - ledger.dropped.load(Ordering::SeqCst),
            b.made - b.dropped,
        ),
    ];
    let diffs: Vec<String> = rows
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(name, got, want)| format!("  {name}: pool {got}, model {want}"))
        .collect();
    if !diffs.is_empty() {
        panic!(
            "{}\n{}\n{stats:?}\n{channel_stats:?}\n{}",
            trail(cfg, ops),
            diffs.join("\n"),
            model.dump()
        );
    }
    #[cfg(feature = "metrics")]
    if let Some(what) = exported_mismatch(cfg, driver, model) {
        panic!("{}\n  {what}\n{}", trail(cfg, ops), model.dump());
    }
    for h in 0..HOLDERS {
        let got = driver.holders[h].as_ref().map(seen_guard);
        let want = model.holders[h].as_ref().map(|held| model.seen(held));
        if got != want {
            panic!(
                "{}\n  holder {h}: pool {got:?}, model {want:?}\n{}",
                trail(cfg, ops),
                model.dump()
            );
        }
    }
    for hc in 0..CHANNEL_HOLDERS {
        let got = driver.channel_holders[hc].as_ref().map(ChannelGuard::id);
        let want = model.channel_holders[hc].map(|i| i as u64);
        if got != want {
            panic!(
                "{}\n  channel holder {hc}: pool {got:?}, model {want:?}\n{}",
                trail(cfg, ops),
                model.dump()
            );
        }
    }
}
