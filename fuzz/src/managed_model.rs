//! Differential driver for `slotpool::managed::Pool`: decodes a pool configuration and a
//! sequence of operations from bytes, runs each operation on a real pool single-threaded (a
//! current-thread tokio runtime with a paused clock, a mock clock, a scripted manager)
//! and on a plain sequential model, and panics on the first difference in an outcome, in
//! `stats()` or `status()`, in an object held by the driver (its id, slot, age, idle time and
//! recycle count), in the manager's own books, or (with the `metrics` feature) in what the
//! pool exports.
//!
//! # The model
//!
//! Written from the managed pool's documentation (the module docs, `PoolBuilder`, `Recycle`,
//! `QueueMode`, `CreateBackoff`, `Stats`, `Status`, `Manager`, `PoolError`, `Object`,
//! `docs/porting.md`), not from its code. It holds the slots (empty, idle with an object, or
//! busy: held by a caller or being created), the objects' stamps, the counters, the create
//! back-off's state and the background task's wake-up. What it models, by the docs' words:
//!
//! * `get`, `try_get`, `get_timeout`: the idle object in the lowest slot (`QueueMode::Lowest`)
//!   or the first one from one past the last checkout's slot, wrapping (`QueueMode::Fifo`);
//!   past `max_lifetime` at checkout it is dropped and the `get` goes on; recycled as the
//!   `Recycle` policy says (`Always`, `Never`, `IdleLongerThan`: idle *longer* than the
//!   threshold, counted from the last return); a rejected recycle (the manager's `Err` from
//!   `recycle_now` or `recycle`, a `pre_recycle` or `post_recycle` hook's `Err`, a
//!   `recycle_timeout`) drops the object and the `get` goes on; a panicking one fails the
//!   `get`. Nothing idle: create in the lowest empty slot if there is room (a failure, a
//!   panic, a `create_timeout` or a `post_create` hook's `Err` fails the `get` and gives the
//!   room back), else wait (`try_get`: `NoCapacity`) until the wait deadline.
//! * A `get` that waits while another caller returns an object is handed that object (or, if
//!   the return drops it, the room to create).
//! * `get_timeout`'s deadline over all steps, the step it names, and what becomes of the step
//!   it cut short: a recycle is dropped (`discarded`), a creation finishes off the caller
//!   (`created_off_caller`, the object idle) or fails there (`create_failures`).
//! * Returns: `has_broken` (or its panic) drops the object as `broken`; past `max_lifetime` it
//!   is `expired`; over the size (shrunk or closed) it is `surplus`; else idle in its slot,
//!   or straight to a waiter.
//! * `reap(now)`: idle objects past `max_lifetime` (`expired`) and idle ones idle for at
//!   least `idle_timeout` beyond the lowest `min_idle` idle ones (`reaped`).
//! * `min_idle`: the background task tops up at start and whenever it is woken: after objects
//!   are dropped and after a checkout that leaves fewer than `min_idle` idle (choice: also
//!   after `Object::take` and `retain_and_take`, whose objects leave the pool too); a
//!   checkout that leaves more, and `resize`, may wake it (the model learns from the pool
//!   whether they did: `Model::settle`). A top-up creates until `min_idle` are idle, the
//!   pool is full, or a creation fails or is paused. `prewarm()` does the same in the caller.
//! * `resize` (shrinking drops idle objects, highest slots first, never more than the
//!   excess; busy ones go as they come back), `retain` and `retain_and_take`, `add`,
//!   `Object::take`, `dedicated`, `close`.
//! * The create back-off (with `fail_fast`): after `after_failures` failed creations in a row
//!   creations pause; a `get` that needs one fails with `Unavailable` (its `retry_after`
//!   between half the pause's length and all of it), a top-up stops; both count in `paused`;
//!   once the pause is over the next creation is the probe: its success closes the breaker,
//!   its failure starts a pause twice as long, up to the longest.
//! * Panics of user code (create at its call or its poll, `recycle_now`, `recycle`, the three
//!   hooks, `has_broken`, `detach`, an object's destructor, a `retain` predicate) are counted
//!   in `panics`; they fail a `get` only from create, recycle and the hooks.
//! * Every counter of `Stats`, `Status`'s gauges, and the manager's books (objects made,
//!   dropped, detached; create, recycle and hook calls).
//! * Metrics (with the `metrics` feature): `stats()` exported through `slotpool::metrics`
//!   after every op, each `slotpool_managed_*` gauge and counter of the metrics table but the
//!   hold watch's two against the model's value for it (`wait_nanoseconds` zero, as
//!   `wait_time`), and one `slotpool_managed_wait_seconds` sample per wait (the model's
//!   `waits`).
//!
//! Not modelled: async hooks, `get_timeouts`, the background reaper (`reap_interval(None)`:
//! reaping is by hand), concurrent callers beyond one waiter at a time, a back-off whose
//! callers wait out the pause (its sleeps run on tokio's clock, its pause on quanta's),
//! `build_eager`, `Object::pool`, the error sink, the hold watch and its two metrics
//! (`held_too_long`, `hold_nanoseconds`: the driver never turns it on), the wait samples'
//! values, `wait_time` (always zero: waits
//! run on tokio's clock, the pool measures them on the mock). Hangs (`create` or `recycle`
//! pending for a while) are generated only when `min_idle` is 0, so that the background
//! task's top-ups never run in the middle of an operation (with no hang and no back-off
//! sleep, an operation suspends only to wait while the pool is full, when a top-up can do
//! nothing).
//!
//! The model found two departures of the pool from its docs, both fixed since (a `Lowest`
//! checkout that left fewer than `min_idle` idle woke no top-up; a `get_timeout` cut short
//! in its recycle was not counted in `gets`); `core/tests/replay/managed_fuzz_replay.rs` keeps their
//! inputs.
//!
//! Where the docs leave a choice open, the model takes one and says so at the spot
//! ("Choice:").
//!
//! Shared by the `managed_ops` fuzz target and by `cargo test` (`core/tests/
//! managed_fuzz_replay.rs` includes this file with `#[path]`; it refers to the byte reader
//! as `crate::bytes`, which both crates provide at their root).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use slotpool::managed::{
    AddError, CreateBackoff, Hook, HookError, Manager, Meta, Object, Pool, PoolError, QueueMode,
    Recycle, RecycleError, RecycleResult, Step,
};

use crate::bytes::Bytes;

/// Holders of checked-out objects the ops choose from (more than any pool here can hand out).
const HOLDERS: usize = 6;
/// Longest op sequence decoded from one input.
const MAX_OPS: usize = 400;
/// One step of the mock quanta clock: lifetimes, idle timeouts and recycle thresholds are
/// whole steps, so an `Advance` lands exactly on their boundaries.
const STEP: Duration = Duration::from_secs(1);
/// The pool's `create_timeout`, `recycle_timeout` and `wait_timeout` (tokio's paused clock, in
/// milliseconds). Multiples of 10 ms.
const CREATE_TIMEOUT: u64 = 40;
const RECYCLE_TIMEOUT: u64 = 30;
const WAIT_TIMEOUT: u64 = 50;
/// `get_timeout` deadlines: 3 mod 10 ms, never equal to a multiple of 10 plus a hang.
const GET_TIMEOUTS: [u64; 4] = [13, 33, 53, 73];
/// How long a hanging `create` or `recycle` takes: 5 mod 10 ms, so no two timers of one `get`
/// ever fire at the same instant (every other timer is a multiple of 10 ms after a step's
/// start, or 3 mod 10 ms).
const HANGS: [u64; 6] = [5, 15, 25, 35, 45, 55];
/// How long a `get` may run (tokio's clock) before the driver gives up on it: one that waits
/// with no deadline would wait for ever.
const WATCHDOG: Duration = Duration::from_secs(100);
/// How far tokio's clock is moved after each op, so that everything the op left running
/// (a creation finished off its caller, the background top-up) ends before the comparison.
const SETTLE: Duration = Duration::from_secs(3600);
/// The back-off's first and longest pause: both below one `STEP`, so any advance of the mock
/// clock ends a pause, and a pause is on exactly while the clock has not moved since it began.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LONGEST: Duration = Duration::from_millis(400);
/// Scripted acts queued at most (per kind).
const MAX_SCRIPT: usize = 8;

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

// ---------------------------------------------------------------------------------------------
// The scripted manager.

#[derive(Debug)]
pub struct FuzzError;

impl std::fmt::Display for FuzzError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("injected failure")
    }
}

impl std::error::Error for FuzzError {}

/// Marks the panics this driver injects (which the pool must contain).
const INJECTED: &str = "injected by managed_ops";

/// What the next `create` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CreateAct {
    Ok,
    Fail,
    /// Panics when `create` is called.
    PanicCall,
    /// Panics when the future `create` returned is polled.
    PanicPoll,
    /// Succeeds after this many milliseconds of tokio's clock.
    Hang(u64),
}

/// What the next recycle does (`recycle_now` decides the first three; the others leave it to
/// `recycle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecycleAct {
    NowOk,
    NowReject,
    NowPanic,
    AsyncOk,
    AsyncReject,
    AsyncPanic,
    /// `recycle` accepts after this many milliseconds of tokio's clock.
    Hang(u64),
}

/// What the next call of a hook does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HookAct {
    Ok,
    Reject,
    Panic,
}

/// The hooks a pool built with `Cfg::hooks` has, one of each (their scripts' index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HookKind {
    PostCreate = 0,
    PreRecycle = 1,
    PostRecycle = 2,
}

/// What the manager saw and did, and its script.
#[derive(Debug, Default)]
struct Ledger {
    made: AtomicU64,
    dropped: AtomicU64,
    detaches: AtomicU64,
    create_calls: AtomicU64,
    recycle_calls: AtomicU64,
    creates: Mutex<VecDeque<CreateAct>>,
    recycles: Mutex<VecDeque<RecycleAct>>,
    /// The act `recycle_now` left to `recycle`.
    deferred: Mutex<Option<RecycleAct>>,
    hook_calls: AtomicU64,
    hooks: [Mutex<VecDeque<HookAct>>; 3],
}

impl Ledger {
    fn conn(self: &Arc<Self>) -> Conn {
        Conn {
            id: self.made.fetch_add(1, Ordering::SeqCst),
            broken: false,
            panic_broken: false,
            panic_detach: false,
            panic_drop: false,
            ledger: Arc::clone(self),
        }
    }

    fn next_create(&self) -> CreateAct {
        let act = self.creates.lock().unwrap().pop_front();
        act.unwrap_or(CreateAct::Ok)
    }

    fn next_recycle(&self) -> RecycleAct {
        let act = self.recycles.lock().unwrap().pop_front();
        act.unwrap_or(RecycleAct::NowOk)
    }

    /// A hook of `kind` that acts as its script says (and accepts when it says nothing).
    fn hook(self: &Arc<Self>, kind: HookKind) -> Hook<Scripted> {
        let ledger = Arc::clone(self);
        Hook::sync_fn(move |_: &mut Conn, _: &Meta| {
            ledger.hook_calls.fetch_add(1, Ordering::SeqCst);
            let act = ledger.hooks[kind as usize].lock().unwrap().pop_front();
            match act.unwrap_or(HookAct::Ok) {
                HookAct::Ok => Ok(()),
                HookAct::Reject => Err(HookError::message("rejected")),
                HookAct::Panic => panic!("{INJECTED}"),
            }
        })
    }
}

/// A pooled object: its id and what it does when the pool asks or drops it.
#[derive(Debug)]
pub struct Conn {
    id: u64,
    broken: bool,
    panic_broken: bool,
    panic_detach: bool,
    panic_drop: bool,
    ledger: Arc<Ledger>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.ledger.dropped.fetch_add(1, Ordering::SeqCst);
        if self.panic_drop {
            panic!("{INJECTED}");
        }
    }
}

/// The scripted manager.
#[derive(Debug)]
pub struct Scripted {
    ledger: Arc<Ledger>,
}

/// Panics (when polled) with the injected message, or returns `value`.
async fn ready_or_panic<T>(value: Option<T>) -> T {
    match value {
        Some(value) => value,
        None => panic!("{INJECTED}"),
    }
}

impl Manager for Scripted {
    type Type = Conn;
    type Error = FuzzError;

    fn create(&self) -> impl Future<Output = Result<Conn, FuzzError>> + Send {
        let ledger = Arc::clone(&self.ledger);
        ledger.create_calls.fetch_add(1, Ordering::SeqCst);
        let act = ledger.next_create();
        if act == CreateAct::PanicCall {
            panic!("{INJECTED}");
        }
        async move {
            match act {
                CreateAct::Ok | CreateAct::PanicCall => Ok(ledger.conn()),
                CreateAct::Fail => Err(FuzzError),
                CreateAct::PanicPoll => ready_or_panic(None).await,
                CreateAct::Hang(ms) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(ledger.conn())
                }
            }
        }
    }

    fn recycle_now(&self, _: &mut Conn, _: &Meta) -> Option<RecycleResult<FuzzError>> {
        self.ledger.recycle_calls.fetch_add(1, Ordering::SeqCst);
        match self.ledger.next_recycle() {
            RecycleAct::NowOk => Some(Ok(())),
            RecycleAct::NowReject => Some(Err(RecycleError::message("rejected"))),
            RecycleAct::NowPanic => panic!("{INJECTED}"),
            deferred => {
                *self.ledger.deferred.lock().unwrap() = Some(deferred);
                None
            }
        }
    }

    fn recycle(
        &self,
        _: &mut Conn,
        _: &Meta,
    ) -> impl Future<Output = RecycleResult<FuzzError>> + Send {
        let act = self.ledger.deferred.lock().unwrap().take();
        async move {
            match act.unwrap_or(RecycleAct::AsyncOk) {
                RecycleAct::AsyncReject | RecycleAct::NowReject => {
                    Err(RecycleError::Backend(FuzzError))
                }
                RecycleAct::AsyncPanic | RecycleAct::NowPanic => ready_or_panic(None).await,
                RecycleAct::Hang(ms) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(())
                }
                RecycleAct::AsyncOk | RecycleAct::NowOk => Ok(()),
            }
        }
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        if conn.panic_broken {
            panic!("{INJECTED}");
        }
        conn.broken
    }

    fn detach(&self, conn: &mut Conn) {
        self.ledger.detaches.fetch_add(1, Ordering::SeqCst);
        if conn.panic_detach {
            panic!("{INJECTED}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The configuration and the ops.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Always,
    Never,
    /// Steps.
    IdleLongerThan(u64),
}

#[derive(Debug, Clone, Copy)]
struct Cfg {
    max_size: usize,
    min_idle: usize,
    /// Steps.
    lifetime: Option<u64>,
    /// Steps.
    idle_timeout: u64,
    recycle: Policy,
    fifo: bool,
    /// The back-off's `after_failures`, if it is on (always with `fail_fast`).
    backoff: Option<u32>,
    /// Whether the pool has a `wait_timeout` (`WAIT_TIMEOUT`).
    wait: bool,
    /// Whether the pool has a `post_create`, a `pre_recycle` and a `post_recycle` hook.
    hooks: bool,
}

impl Cfg {
    fn decode(bytes: &mut Bytes<'_>) -> Self {
        let max_size = 1 + bytes.below(4);
        let b = bytes.byte();
        // One configuration in three keeps objects idle, two in three cap their lifetime.
        let min_idle = match b % 3 {
            0 => 1 + (b as usize / 3) % max_size,
            _ => 0,
        };
        let b = bytes.byte();
        let lifetime = match b % 3 {
            0 => None,
            _ => Some(2 + u64::from(b / 3) % 8),
        };
        let b = bytes.byte();
        let idle_timeout = 1 + u64::from(b % 6);
        let hooks = (b / 6) % 2 == 1;
        let b = bytes.byte();
        let recycle = match b % 3 {
            0 => Policy::Always,
            1 => Policy::Never,
            _ => Policy::IdleLongerThan(1 + u64::from(b / 3) % 3),
        };
        let b = bytes.byte();
        let fifo = b % 2 == 1;
        let backoff = ((b / 2) % 2 == 1).then_some(1 + u32::from(b / 4) % 3);
        let wait = (b / 16) % 2 == 1;
        Cfg {
            max_size,
            min_idle,
            lifetime,
            idle_timeout,
            recycle,
            fifo,
            backoff,
            wait,
            hooks,
        }
    }

    /// Hangs only where no background top-up can run in the middle of an op.
    fn hangs(&self) -> bool {
        self.min_idle == 0
    }

    fn build(&self, manager: Scripted, clock: slotpool::Clock) -> Pool<Scripted> {
        let ledger = Arc::clone(&manager.ledger);
        let backoff = match self.backoff {
            Some(after_failures) => CreateBackoff {
                after_failures,
                first: BACKOFF_FIRST,
                backoff: BACKOFF_LONGEST,
                fail_fast: true,
            },
            None => CreateBackoff::off(),
        };
        let built = Pool::builder(manager)
            .max_size(self.max_size)
            .min_idle(self.min_idle)
            .max_lifetime(self.lifetime.map(|steps| STEP * steps as u32))
            .idle_timeout(STEP * self.idle_timeout as u32)
            .recycle(match self.recycle {
                Policy::Always => Recycle::Always,
                Policy::Never => Recycle::Never,
                Policy::IdleLongerThan(steps) => Recycle::IdleLongerThan(STEP * steps as u32),
            })
            .queue_mode(if self.fifo {
                QueueMode::Fifo
            } else {
                QueueMode::Lowest
            })
            .create_backoff(backoff)
            .wait_timeout(self.wait.then_some(Duration::from_millis(WAIT_TIMEOUT)))
            .create_timeout(Some(Duration::from_millis(CREATE_TIMEOUT)))
            .recycle_timeout(Some(Duration::from_millis(RECYCLE_TIMEOUT)))
            .reap_interval(None)
            .clock(clock);
        let built = if self.hooks {
            built
                .post_create(ledger.hook(HookKind::PostCreate))
                .pre_recycle(ledger.hook(HookKind::PreRecycle))
                .post_recycle(ledger.hook(HookKind::PostRecycle))
        } else {
            built
        };
        let built = built.build();
        match built {
            Ok(pool) => pool,
            Err(error) => panic!("valid configuration {self:?} refused: {error}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GetKind {
    /// `get`: waits up to the pool's `wait_timeout` (or for ever).
    Get,
    /// `try_get`: never waits.
    TryGet,
    /// `get_timeout(ms)`.
    Within(u64),
}

/// What a `Mark` op sets on a held object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Broken,
    PanicBroken,
    PanicDetach,
    PanicDrop,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Get(GetKind),
    /// A `get` that, at its first suspension (or when it ends, if it never suspends), sees
    /// holder `h`'s object come back.
    GetWhileReturning(GetKind, usize),
    Return(usize),
    Take(usize),
    Mark(usize, Mark),
    ScriptCreate(CreateAct),
    ScriptRecycle(RecycleAct),
    ScriptHook(HookKind, HookAct),
    Advance(u32),
    Reap,
    Prewarm,
    Resize(usize),
    /// Keep the idle objects whose `id % 8` bit is set in `mask`; the predicate panics for
    /// `id % 8 == panic_at`; `take`: `retain_and_take`.
    Retain {
        mask: u8,
        panic_at: Option<u64>,
        take: bool,
    },
    Add,
    Dedicated,
    Close,
}

fn decode_kind(bytes: &mut Bytes<'_>) -> GetKind {
    let b = bytes.byte();
    match b % 4 {
        0 | 1 => GetKind::Get,
        2 => GetKind::TryGet,
        _ => GetKind::Within(GET_TIMEOUTS[usize::from(b / 4) % GET_TIMEOUTS.len()]),
    }
}

/// A holder that holds an object (the byte picks among them), or holder 0 if none does.
fn decode_holder(bytes: &mut Bytes<'_>, held: &[usize]) -> usize {
    let b = usize::from(bytes.byte());
    if held.is_empty() {
        0
    } else {
        held[b % held.len()]
    }
}

/// The next op; `held`: the holders that hold an object now.
fn decode(bytes: &mut Bytes<'_>, cfg: &Cfg, held: &[usize]) -> Op {
    let op = bytes.byte();
    match op % 20 {
        0..=2 => Op::Get(decode_kind(bytes)),
        3 => Op::GetWhileReturning(decode_kind(bytes), decode_holder(bytes, held)),
        4 | 5 => Op::Return(decode_holder(bytes, held)),
        6 => Op::Take(decode_holder(bytes, held)),
        7 => {
            let h = decode_holder(bytes, held);
            let mark = match bytes.below(4) {
                0 => Mark::Broken,
                1 => Mark::PanicBroken,
                2 => Mark::PanicDetach,
                _ => Mark::PanicDrop,
            };
            Op::Mark(h, mark)
        }
        8 => {
            let b = bytes.byte();
            let hang = HANGS[usize::from(b / 8) % HANGS.len()];
            Op::ScriptCreate(match b % 8 {
                0 => CreateAct::Ok,
                1 | 2 => CreateAct::Fail,
                3 => CreateAct::PanicCall,
                4 => CreateAct::PanicPoll,
                _ if cfg.hangs() => CreateAct::Hang(hang),
                _ => CreateAct::Ok,
            })
        }
        9 => {
            let b = bytes.byte();
            let hang = HANGS[usize::from(b / 8) % HANGS.len()];
            Op::ScriptRecycle(match b % 8 {
                0 => RecycleAct::NowOk,
                1 => RecycleAct::NowReject,
                2 => RecycleAct::NowPanic,
                3 => RecycleAct::AsyncOk,
                4 => RecycleAct::AsyncReject,
                5 => RecycleAct::AsyncPanic,
                _ if cfg.hangs() => RecycleAct::Hang(hang),
                _ => RecycleAct::AsyncOk,
            })
        }
        10 | 11 => Op::Advance(bytes.below(4) as u32),
        12 => Op::Reap,
        13 => Op::Prewarm,
        14 => Op::Resize(bytes.below(6)),
        15 => {
            let mask = bytes.byte();
            let b = bytes.byte();
            let panic_at = (b % 16 < 8)
                .then_some(u64::from(b % 16))
                .filter(|_| b >= 192);
            Op::Retain {
                mask,
                panic_at,
                take: b % 2 == 1 && b < 192,
            }
        }
        16 => Op::Add,
        17 => Op::Dedicated,
        18 if op >= 240 => Op::Close,
        18 => Op::Reap,
        19 if cfg.hooks => {
            let b = bytes.byte();
            let kind = match b % 3 {
                0 => HookKind::PostCreate,
                1 => HookKind::PreRecycle,
                _ => HookKind::PostRecycle,
            };
            let act = match (b / 3) % 3 {
                0 => HookAct::Ok,
                1 => HookAct::Reject,
                _ => HookAct::Panic,
            };
            Op::ScriptHook(kind, act)
        }
        _ => Op::Get(decode_kind(bytes)),
    }
}

// ---------------------------------------------------------------------------------------------
// Outcomes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Timeout(Step),
    Create,
    Closed,
    NoCapacity,
    Unavailable,
    Panicked(Step),
    PostCreateHook,
}

/// An object as seen through its `Object` (or by a `retain` predicate): its id, its slot
/// (`usize::MAX` where none is shown), and its `Meta` at the time of the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    id: u64,
    slot: usize,
    age: u64,
    idle: u64,
    recycles: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Got(Seen),
    Failed(Failure),
    /// The watchdog ended a `get` that would have waited for ever.
    Hung,
    /// A holder op on an empty holder, or a `get` with no free holder.
    Nothing,
    Done,
    Count(usize),
    Retained {
        kept: usize,
        removed: usize,
        panics: usize,
        /// What the predicate saw, by id.
        seen: Vec<Seen>,
    },
    Added(Result<(), Failure>),
    Dedicated(Result<u64, Failure>),
}

fn failure(error: &PoolError<FuzzError>) -> Failure {
    match error {
        PoolError::Timeout { step, .. } => Failure::Timeout(*step),
        PoolError::Create(_) => Failure::Create,
        PoolError::Closed => Failure::Closed,
        PoolError::NoCapacity => Failure::NoCapacity,
        PoolError::Unavailable { .. } => Failure::Unavailable,
        PoolError::Panicked { step, .. } => Failure::Panicked(*step),
        PoolError::PostCreateHook(_) => Failure::PostCreateHook,
        other => panic!("a failure the model does not know: {other}"),
    }
}

fn seen_meta(id: u64, slot: usize, meta: &Meta, now: slotpool::Instant) -> Seen {
    Seen {
        id,
        slot,
        age: nanos(meta.age(now)),
        idle: nanos(meta.idle(now)),
        recycles: meta.recycle_count(),
    }
}

fn seen_object(object: &Object<Scripted>, now: slotpool::Instant) -> Seen {
    seen_meta(object.id, Object::slot(object), &Object::meta(object), now)
}

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone)]
struct MObj {
    id: u64,
    /// Nanoseconds on the mock clock.
    created: u64,
    /// The last time it went idle (a return, or a creation that left it idle).
    returned: Option<u64>,
    recycles: u64,
    broken: bool,
    panic_broken: bool,
    panic_detach: bool,
    panic_drop: bool,
}

#[derive(Debug, Clone)]
enum MSlot {
    Empty,
    Idle(MObj),
    /// Held by a caller, or being created.
    Busy,
}

/// Why an object left the pool (its counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    Discarded,
    Broken,
    Expired,
    Reaped,
    Surplus,
    RetainedOut,
}

/// `Stats`' counters, by the model.
#[derive(Debug, Default, Clone)]
struct Counts {
    gets: u64,
    gets_direct: u64,
    gets_waited: u64,
    gets_timed_out: u64,
    checkouts: u64,
    waits: u64,
    created: u64,
    created_off_caller: u64,
    create_failures: u64,
    recycled: u64,
    discarded: u64,
    broken: u64,
    expired: u64,
    reaped: u64,
    surplus: u64,
    retained_out: u64,
    detached: u64,
    panics: u64,
    paused: u64,
}

/// The manager's books, by the model.
#[derive(Debug, Default, Clone)]
struct Books {
    made: u64,
    dropped: u64,
    detaches: u64,
    create_calls: u64,
    recycle_calls: u64,
    hook_calls: u64,
}

/// The create back-off (`CreateBackoff`'s docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaker {
    /// Creations go ahead; `fails` in a row so far.
    Closed { fails: u32 },
    /// Creations are held back while the clock has not moved since `start` (every pause is
    /// shorter than one step); `len` is the pause's nominal length, `seen` the `retry_after`
    /// the pool answered for it, once one did.
    Paused {
        start: u64,
        len: u64,
        seen: Option<u64>,
    },
    /// The pause is over and the probe is under way.
    Probing { len: u64 },
}

/// A pool's expected answer to a creation held back: the pause's nominal length and the
/// `retry_after` already answered for it.
#[derive(Debug, Clone, Copy)]
struct HeldBack {
    len: u64,
    seen: Option<u64>,
}

#[derive(Debug, Clone)]
struct Model {
    cfg: Cfg,
    /// The mock clock, nanoseconds.
    now: u64,
    slots: Vec<MSlot>,
    holders: Vec<Option<(usize, MObj)>>,
    max_size: usize,
    closed: bool,
    /// `QueueMode::Fifo`'s cursor: one past the slot of the last checkout.
    cursor: usize,
    /// Wake-ups of the background task since it last ran: those the docs call for (it starts
    /// with one), and those they leave open (a checkout that leaves `min_idle` or more idle
    /// "may leave fewer"; a second wake-up for one batch of drops; `resize`'s). See
    /// [`Model::settle`].
    wakes: u32,
    maybe_wakes: u32,
    counts: Counts,
    books: Books,
    creates: VecDeque<CreateAct>,
    recycles: VecDeque<RecycleAct>,
    hooks: [VecDeque<HookAct>; 3],
    breaker: Breaker,
    /// The last `Unavailable` answer's expectation, for the driver to check its `retry_after`.
    held_back: Option<HeldBack>,
}

impl Model {
    fn new(cfg: Cfg) -> Self {
        Model {
            cfg,
            now: 0,
            slots: Vec::new(),
            holders: vec![None; HOLDERS],
            max_size: cfg.max_size,
            closed: false,
            cursor: 0,
            wakes: 1,
            maybe_wakes: 0,
            counts: Counts::default(),
            books: Books::default(),
            creates: VecDeque::new(),
            recycles: VecDeque::new(),
            hooks: Default::default(),
            breaker: Breaker::Closed { fails: 0 },
            held_back: None,
        }
    }

    /// The model's state in a few lines, for a failure's message.
    fn dump(&self) -> String {
        let slots: Vec<String> = self
            .slots
            .iter()
            .map(|slot| match slot {
                MSlot::Empty => "-".to_string(),
                MSlot::Idle(obj) => format!("idle #{}", obj.id),
                MSlot::Busy => "busy".to_string(),
            })
            .collect();
        let holders: Vec<String> = self
            .holders
            .iter()
            .enumerate()
            .filter_map(|(h, held)| {
                held.as_ref()
                    .map(|(slot, obj)| format!("h{h}: #{} in slot {slot}", obj.id))
            })
            .collect();
        format!(
            "model: now {} steps, max_size {}, closed {}, cursor {}, wakes {} (+{}), {:?}\n  \
             slots [{}]\n  \
             holders [{}]\n  scripted creates {:?}, recycles {:?}, hooks {:?}\n  {:?}\n  {:?}",
            self.now as f64 / nanos(STEP) as f64,
            self.max_size,
            self.closed,
            self.cursor,
            self.wakes,
            self.maybe_wakes,
            self.breaker,
            slots.join(", "),
            holders.join(", "),
            self.creates,
            self.recycles,
            self.hooks,
            self.counts,
            self.books,
        )
    }

    // --- gauges -------------------------------------------------------------------------

    fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|slot| !matches!(slot, MSlot::Empty))
            .count()
    }

    fn idle(&self) -> usize {
        self.slots
            .iter()
            .filter(|slot| matches!(slot, MSlot::Idle(_)))
            .count()
    }

    fn free_holder(&self) -> Option<usize> {
        self.holders.iter().position(Option::is_none)
    }

    // --- time ---------------------------------------------------------------------------

    fn lifetime(&self) -> Option<u64> {
        self.cfg.lifetime.map(|steps| steps * nanos(STEP))
    }

    /// "Drops an object once it is this old": at an age of `max_lifetime` or more.
    fn expired(&self, obj: &MObj) -> bool {
        self.lifetime()
            .is_some_and(|lifetime| self.now - obj.created >= lifetime)
    }

    fn idle_for(&self, obj: &MObj) -> u64 {
        self.now - obj.returned.unwrap_or(obj.created)
    }

    /// Whether an idle object just checked out is recycled (`Recycle`'s docs).
    fn recycle_due(&self, obj: &MObj) -> bool {
        match self.cfg.recycle {
            Policy::Always => true,
            Policy::Never => false,
            Policy::IdleLongerThan(steps) => self.idle_for(obj) > steps * nanos(STEP),
        }
    }

    fn seen(&self, slot: usize, obj: &MObj) -> Seen {
        Seen {
            id: obj.id,
            slot,
            age: self.now - obj.created,
            idle: self.idle_for(obj),
            recycles: obj.recycles,
        }
    }

    // --- slots and objects ---------------------------------------------------------------

    /// The idle slot a checkout takes: the lowest, or (`Fifo`) the first from the cursor on,
    /// wrapping around.
    fn pick_idle(&self) -> Option<usize> {
        let is_idle = |i: &usize| matches!(self.slots[*i], MSlot::Idle(_));
        let n = self.slots.len();
        if self.cfg.fifo {
            let start = self.cursor.min(n);
            (start..n).chain(0..start).find(is_idle)
        } else {
            (0..n).find(is_idle)
        }
    }

    /// Takes the idle object out of `slot` for a `get`.
    fn take_idle(&mut self, slot: usize) -> MObj {
        match std::mem::replace(&mut self.slots[slot], MSlot::Busy) {
            MSlot::Idle(obj) => obj,
            other => panic!("model: slot {slot} is not idle: {other:?}"),
        }
    }

    /// Claims the lowest empty slot (for a creation or an added object).
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

    fn new_obj(&mut self) -> MObj {
        let id = self.books.made;
        self.books.made += 1;
        MObj {
            id,
            created: self.now,
            returned: None,
            recycles: 0,
            broken: false,
            panic_broken: false,
            panic_detach: false,
            panic_drop: false,
        }
    }

    /// The background task is woken (it tops `min_idle` up at the next settle).
    fn wake(&mut self) {
        self.wakes += 1;
    }

    /// `n` objects left the pool in one batch (a reap pass, `retain`, a shrink, `close`): one
    /// wake-up for the batch, maybe one per object.
    fn batch_wake(&mut self, n: u32) {
        if n > 0 {
            self.wakes += 1;
            self.maybe_wakes += n - 1;
        }
    }

    /// Drops an object that was in `slot` (busy or idle): detach, destructor, its counter,
    /// its room back. The caller wakes the background task.
    fn drop_obj(&mut self, slot: usize, obj: MObj, gone: Gone) {
        self.slots[slot] = MSlot::Empty;
        self.books.detaches += 1;
        if obj.panic_detach {
            self.counts.panics += 1;
        }
        self.books.dropped += 1;
        if obj.panic_drop {
            self.counts.panics += 1;
        }
        let counter = match gone {
            Gone::Discarded => &mut self.counts.discarded,
            Gone::Broken => &mut self.counts.broken,
            Gone::Expired => &mut self.counts.expired,
            Gone::Reaped => &mut self.counts.reaped,
            Gone::Surplus => &mut self.counts.surplus,
            Gone::RetainedOut => &mut self.counts.retained_out,
        };
        *counter += 1;
    }

    /// [`Model::drop_obj`] for one object on its own: the background task is woken.
    fn drop_one(&mut self, slot: usize, obj: MObj, gone: Gone) {
        self.drop_obj(slot, obj, gone);
        self.wake();
    }

    /// An object leaves the pool for the caller (`Object::take`, `retain_and_take`): detached,
    /// its room back; the driver drops it.
    fn detach_out(&mut self, slot: usize, obj: MObj) {
        self.slots[slot] = MSlot::Empty;
        self.books.detaches += 1;
        if obj.panic_detach {
            self.counts.panics += 1;
        }
        self.counts.detached += 1;
        self.books.dropped += 1;
    }

    /// Holder `h`'s object comes back. Choice (the docs do not order them): `has_broken` is
    /// asked first, then the lifetime, then the size. With a `waiter`, an object that stays is
    /// handed to it (returned here) instead of going idle.
    fn return_object(&mut self, h: usize, waiter: bool) -> Option<(usize, MObj)> {
        let (slot, mut obj) = self.holders[h].take()?;
        if obj.panic_broken {
            self.counts.panics += 1;
            self.drop_one(slot, obj, Gone::Broken);
            return None;
        }
        if obj.broken {
            self.drop_one(slot, obj, Gone::Broken);
            return None;
        }
        if self.expired(&obj) {
            self.drop_one(slot, obj, Gone::Expired);
            return None;
        }
        if self.closed || self.live() > self.max_size {
            self.drop_one(slot, obj, Gone::Surplus);
            return None;
        }
        obj.returned = Some(self.now);
        if waiter {
            return Some((slot, obj));
        }
        self.slots[slot] = MSlot::Idle(obj);
        None
    }

    // --- the create back-off ---------------------------------------------------------------

    /// Whether a creation may start now: `Ok(probe)`, or held back.
    fn admit(&mut self) -> Result<bool, HeldBack> {
        if self.cfg.backoff.is_none() {
            return Ok(false);
        }
        match self.breaker {
            Breaker::Closed { .. } => Ok(false),
            Breaker::Paused { start, len, seen } => {
                if self.now > start {
                    self.breaker = Breaker::Probing { len };
                    Ok(true)
                } else {
                    Err(HeldBack { len, seen })
                }
            }
            Breaker::Probing { .. } => panic!("model: a second creation while the probe runs"),
        }
    }

    fn creation_succeeded(&mut self) {
        if self.cfg.backoff.is_some() {
            self.breaker = Breaker::Closed { fails: 0 };
        }
    }

    fn creation_failed_breaker(&mut self) {
        let Some(after) = self.cfg.backoff else {
            return;
        };
        self.breaker = match self.breaker {
            Breaker::Closed { fails } if fails + 1 >= after => Breaker::Paused {
                start: self.now,
                len: nanos(BACKOFF_FIRST),
                seen: None,
            },
            Breaker::Closed { fails } => Breaker::Closed { fails: fails + 1 },
            Breaker::Probing { len } => Breaker::Paused {
                start: self.now,
                len: (len * 2).min(nanos(BACKOFF_LONGEST)),
                seen: None,
            },
            paused @ Breaker::Paused { .. } => paused,
        };
    }

    /// A creation in `slot` failed: its room back, counted, the back-off told.
    fn creation_failed(&mut self, slot: usize) {
        self.slots[slot] = MSlot::Empty;
        self.counts.create_failures += 1;
        self.creation_failed_breaker();
    }

    /// Runs the hook of `kind`, if the pool has hooks: what it does.
    fn hook(&mut self, kind: HookKind) -> HookAct {
        if !self.cfg.hooks {
            return HookAct::Ok;
        }
        self.books.hook_calls += 1;
        self.hooks[kind as usize].pop_front().unwrap_or(HookAct::Ok)
    }

    /// The manager's `create` returned an object: the `post_create` hook's turn. A rejected
    /// (or panicking) hook drops the object (choice: after its `detach`, as any object
    /// rejected) and the creation fails with the hook's error.
    fn made(&mut self) -> Result<MObj, Failure> {
        let obj = self.new_obj();
        let failure = match self.hook(HookKind::PostCreate) {
            HookAct::Ok => return Ok(obj),
            HookAct::Reject => Failure::PostCreateHook,
            HookAct::Panic => {
                self.counts.panics += 1;
                Failure::Panicked(Step::PostCreate)
            }
        };
        self.books.detaches += 1;
        self.books.dropped += 1;
        Err(failure)
    }

    /// A creation in `slot` whose `post_create` hook rejected the object: its room back,
    /// counted; the back-off hears a success (choice: its docs count only the manager's
    /// errors, timeouts and panics in `create` as failures; the server answered).
    fn rejected_by_hook(&mut self, slot: usize) {
        self.slots[slot] = MSlot::Empty;
        self.counts.create_failures += 1;
        self.creation_succeeded();
    }

    fn next_create(&mut self) -> CreateAct {
        self.books.create_calls += 1;
        self.creates.pop_front().unwrap_or(CreateAct::Ok)
    }

    // --- get -----------------------------------------------------------------------------

    /// The hook of a `get` that sees holder `h`'s object come back at its first suspension:
    /// run it (no waiter), if not yet run.
    fn suspend(&mut self, hook: &mut Option<usize>) {
        if let Some(h) = hook.take() {
            self.return_object(h, false);
        }
    }

    /// One `get` of `kind`; `hook`: the holder whose object comes back at its first
    /// suspension. The object served goes to the first free holder.
    fn get(&mut self, kind: GetKind, mut hook: Option<usize>) -> Outcome {
        let mut run = Run {
            started: false,
            waited: false,
        };
        let outcome = self.get_inner(kind, &mut hook, &mut run);
        // A `get` that never suspended sees the object come back after it.
        self.suspend(&mut hook);
        match outcome {
            Ok((slot, obj)) => {
                let seen = self.seen(slot, &obj);
                let Some(h) = self.free_holder() else {
                    panic!("model: no free holder for the object served");
                };
                self.holders[h] = Some((slot, obj));
                Outcome::Got(seen)
            }
            Err(outcome) => outcome,
        }
    }

    /// `gets` counts a `get` once it waits or creates, or when it ends.
    fn start(&mut self, run: &mut Run) {
        if !run.started {
            run.started = true;
            self.counts.gets += 1;
        }
    }

    fn fail(&mut self, run: &mut Run, failure: Failure) -> Result<(usize, MObj), Outcome> {
        self.start(run);
        if matches!(failure, Failure::Timeout(_)) {
            self.counts.gets_timed_out += 1;
        }
        Err(Outcome::Failed(failure))
    }

    fn serve(&mut self, run: &mut Run, slot: usize, obj: MObj) -> Result<(usize, MObj), Outcome> {
        self.start(run);
        if run.waited {
            self.counts.gets_waited += 1;
        } else {
            self.counts.gets_direct += 1;
        }
        Ok((slot, obj))
    }

    fn get_inner(
        &mut self,
        kind: GetKind,
        hook: &mut Option<usize>,
        run: &mut Run,
    ) -> Result<(usize, MObj), Outcome> {
        // Tokio's clock since the `get` began (milliseconds), and `get_timeout`'s deadline.
        let mut t = 0u64;
        let deadline = match kind {
            GetKind::Within(ms) => Some(ms),
            _ => None,
        };
        // An object handed over by a return while this `get` waited.
        let mut handed: Option<(usize, MObj)> = None;
        loop {
            let (slot, obj) = if let Some(checkout) = handed.take() {
                checkout
            } else if self.closed {
                return self.fail(run, Failure::Closed);
            } else if let Some(slot) = self.pick_idle() {
                let obj = self.take_idle(slot);
                if self.cfg.fifo {
                    self.cursor = slot + 1;
                }
                (slot, obj)
            } else if self.live() < self.max_size {
                // Create.
                self.start(run);
                if let Err(held) = self.admit() {
                    self.counts.paused += 1;
                    self.held_back = Some(held);
                    return self.fail(run, Failure::Unavailable);
                }
                let slot = self.claim();
                let hang = match self.next_create() {
                    CreateAct::Ok => 0,
                    CreateAct::Fail => {
                        self.creation_failed(slot);
                        return self.fail(run, Failure::Create);
                    }
                    CreateAct::PanicCall | CreateAct::PanicPoll => {
                        self.counts.panics += 1;
                        self.creation_failed(slot);
                        return self.fail(run, Failure::Panicked(Step::Create));
                    }
                    CreateAct::Hang(ms) => ms,
                };
                if hang > 0 {
                    self.suspend(hook);
                    let ends = t + hang.min(CREATE_TIMEOUT);
                    if deadline.is_some_and(|deadline| deadline < ends) {
                        // The caller leaves; the creation goes on off it, to its end.
                        if hang > CREATE_TIMEOUT {
                            self.creation_failed(slot);
                        } else if let Ok(mut obj) = self.made() {
                            obj.returned = Some(self.now);
                            self.counts.created += 1;
                            self.counts.created_off_caller += 1;
                            self.creation_succeeded();
                            self.slots[slot] = MSlot::Idle(obj);
                        } else {
                            self.rejected_by_hook(slot);
                        }
                        return self.fail(run, Failure::Timeout(Step::Create));
                    }
                    // The `get` ends with this creation: `t` is read no more.
                    if hang > CREATE_TIMEOUT {
                        self.creation_failed(slot);
                        return self.fail(run, Failure::Timeout(Step::Create));
                    }
                }
                let obj = match self.made() {
                    Ok(obj) => obj,
                    Err(failure) => {
                        self.rejected_by_hook(slot);
                        return self.fail(run, failure);
                    }
                };
                self.counts.created += 1;
                self.counts.checkouts += 1;
                self.creation_succeeded();
                return self.serve(run, slot, obj);
            } else {
                // Wait.
                if kind == GetKind::TryGet {
                    return self.fail(run, Failure::NoCapacity);
                }
                self.start(run);
                run.waited = true;
                self.counts.waits += 1;
                if let Some(h) = hook.take() {
                    if let Some(checkout) = self.return_object(h, true) {
                        handed = Some(checkout);
                        continue;
                    }
                    if self.live() < self.max_size {
                        // The return dropped its object: the room wakes this waiter.
                        continue;
                    }
                }
                return match kind {
                    GetKind::Within(_) => self.fail(run, Failure::Timeout(Step::Wait)),
                    _ if self.cfg.wait => self.fail(run, Failure::Timeout(Step::Wait)),
                    // Waits for ever; the driver's watchdog drops it (taking nothing).
                    _ => Err(Outcome::Hung),
                };
            };

            // An idle object checked out (or handed over).
            self.counts.checkouts += 1;
            // Fewer than `min_idle` left idle: the docs call for a wake-up; `min_idle` or
            // more: a checkout "may leave fewer", so it may wake.
            if self.idle() < self.cfg.min_idle {
                self.wake();
            } else {
                self.maybe_wakes += 1;
            }
            if self.expired(&obj) {
                self.drop_one(slot, obj, Gone::Expired);
                continue;
            }
            if !self.recycle_due(&obj) {
                return self.serve(run, slot, obj);
            }
            match self.hook(HookKind::PreRecycle) {
                HookAct::Ok => {}
                HookAct::Reject => {
                    self.drop_one(slot, obj, Gone::Discarded);
                    continue;
                }
                HookAct::Panic => {
                    self.counts.panics += 1;
                    self.drop_one(slot, obj, Gone::Discarded);
                    return self.fail(run, Failure::Panicked(Step::PreRecycle));
                }
            }
            self.books.recycle_calls += 1;
            let accepted = match self.recycles.pop_front().unwrap_or(RecycleAct::NowOk) {
                RecycleAct::NowOk | RecycleAct::AsyncOk => true,
                RecycleAct::NowReject | RecycleAct::AsyncReject => false,
                RecycleAct::NowPanic | RecycleAct::AsyncPanic => {
                    self.counts.panics += 1;
                    self.drop_one(slot, obj, Gone::Discarded);
                    return self.fail(run, Failure::Panicked(Step::Recycle));
                }
                RecycleAct::Hang(hang) => {
                    // A recycle that does not answer at once: the `get` is under way, counted
                    // as started from here.
                    self.start(run);
                    self.suspend(hook);
                    let ends = t + hang.min(RECYCLE_TIMEOUT);
                    if deadline.is_some_and(|deadline| deadline < ends) {
                        // Cancelled mid-recycle: the object's state is unknown, it is dropped.
                        self.drop_one(slot, obj, Gone::Discarded);
                        return self.fail(run, Failure::Timeout(Step::Recycle));
                    }
                    t = ends;
                    hang < RECYCLE_TIMEOUT
                }
            };
            if !accepted {
                self.drop_one(slot, obj, Gone::Discarded);
                continue;
            }
            match self.hook(HookKind::PostRecycle) {
                HookAct::Ok => {}
                HookAct::Reject => {
                    self.drop_one(slot, obj, Gone::Discarded);
                    continue;
                }
                HookAct::Panic => {
                    self.counts.panics += 1;
                    self.drop_one(slot, obj, Gone::Discarded);
                    return self.fail(run, Failure::Panicked(Step::PostRecycle));
                }
            }
            let mut obj = obj;
            obj.recycles += 1;
            self.counts.recycled += 1;
            return self.serve(run, slot, obj);
        }
    }

    // --- the other ops ---------------------------------------------------------------------

    /// Creates until `min_idle` are idle, the pool is full or closed, or a creation fails or
    /// is held back (`Pool::prewarm`, and the background task's top-up).
    fn top_up(&mut self) -> usize {
        let mut created = 0;
        while !self.closed && self.idle() < self.cfg.min_idle {
            if self.live() >= self.max_size {
                break;
            }
            if self.admit().is_err() {
                self.counts.paused += 1;
                break;
            }
            let slot = self.claim();
            match self.next_create() {
                CreateAct::Ok | CreateAct::Hang(_) => {
                    let Ok(mut obj) = self.made() else {
                        self.rejected_by_hook(slot);
                        break;
                    };
                    obj.returned = Some(self.now);
                    self.counts.created += 1;
                    self.creation_succeeded();
                    self.slots[slot] = MSlot::Idle(obj);
                    created += 1;
                }
                CreateAct::Fail => {
                    self.creation_failed(slot);
                    break;
                }
                CreateAct::PanicCall | CreateAct::PanicPoll => {
                    self.counts.panics += 1;
                    self.creation_failed(slot);
                    break;
                }
            }
        }
        created
    }

    /// What the runtime does between ops: the background task (`min_idle > 0`, and only
    /// until the pool closes), if woken, tops up. It waits for its wake-up between rounds;
    /// wake-ups that come while it has not run yet count as one more round (a task that is
    /// told twice before it looks runs twice, not more). So an op that woke it `w` times
    /// makes `min(w, 2)` rounds; a round after one that filled `min_idle` does nothing, so
    /// the second matters only when the first stopped at a failed creation.
    ///
    /// Where the docs leave wake-ups open (`maybe_wakes`), every count they allow is tried and
    /// the one whose rounds called `create` and held creations back as often as the pool did
    /// (`seen`: the pool's create calls and `paused` after the settle) is kept: rounds that
    /// did neither changed nothing.
    fn settle(&mut self, seen: (u64, u64)) {
        let wakes = std::mem::take(&mut self.wakes);
        let maybe = std::mem::take(&mut self.maybe_wakes);
        if self.cfg.min_idle == 0 || self.closed {
            return;
        }
        let mut options: Vec<u32> = (wakes..=wakes + maybe).map(|w| w.min(2)).collect();
        options.dedup();
        if options.len() > 1 {
            for &rounds in &options {
                let mut tried = self.clone();
                tried.rounds(rounds);
                if (tried.books.create_calls, tried.counts.paused) == seen {
                    *self = tried;
                    return;
                }
            }
        }
        self.rounds(options[0]);
    }

    fn rounds(&mut self, rounds: u32) {
        for _ in 0..rounds {
            self.top_up();
        }
    }

    /// `reap(now)`: idle objects past `max_lifetime` (counted `expired`; choice: an object
    /// past both is `expired`), and idle ones idle `idle_timeout` or longer (choice: at the
    /// boundary it is reaped) beyond the lowest `min_idle` idle ones.
    fn reap(&mut self) -> usize {
        let idle_timeout = self.cfg.idle_timeout * nanos(STEP);
        let idle: Vec<usize> = (0..self.slots.len())
            .filter(|&i| matches!(self.slots[i], MSlot::Idle(_)))
            .collect();
        let mut dropped = 0;
        for (rank, slot) in idle.into_iter().enumerate() {
            let MSlot::Idle(obj) = &self.slots[slot] else {
                unreachable!()
            };
            let gone = if self.expired(obj) {
                Gone::Expired
            } else if rank >= self.cfg.min_idle && self.idle_for(obj) >= idle_timeout {
                Gone::Reaped
            } else {
                continue;
            };
            let MSlot::Idle(obj) = std::mem::replace(&mut self.slots[slot], MSlot::Busy) else {
                unreachable!()
            };
            self.drop_obj(slot, obj, gone);
            dropped += 1;
        }
        self.batch_wake(dropped as u32);
        dropped
    }

    /// `resize(n)`: idle objects beyond the new size dropped now, highest slots first; the
    /// task woken. Choice: on a closed pool nothing changes (`Status::max_size` stays as it
    /// was when the pool closed).
    fn resize(&mut self, max_size: usize) {
        if self.closed {
            return;
        }
        self.max_size = max_size;
        let mut excess = self.live().saturating_sub(max_size);
        let mut dropped = 0;
        for slot in (0..self.slots.len()).rev() {
            if excess == 0 {
                break;
            }
            if matches!(self.slots[slot], MSlot::Idle(_)) {
                let MSlot::Idle(obj) = std::mem::replace(&mut self.slots[slot], MSlot::Busy) else {
                    unreachable!()
                };
                self.drop_obj(slot, obj, Gone::Surplus);
                excess -= 1;
                dropped += 1;
            }
        }
        self.batch_wake(dropped);
        // Choice: a resize may wake the task besides (its docs do not say).
        self.maybe_wakes += 1;
    }

    fn retain(&mut self, mask: u8, panic_at: Option<u64>, take: bool) -> Outcome {
        let (mut kept, mut removed, mut panics) = (0, 0, 0);
        let mut seen = Vec::new();
        for slot in 0..self.slots.len() {
            let MSlot::Idle(obj) = &self.slots[slot] else {
                continue;
            };
            seen.push(Seen {
                slot: usize::MAX,
                ..self.seen(slot, obj)
            });
            let bit = obj.id % 8;
            let keep = if panic_at == Some(bit) {
                panics += 1;
                self.counts.panics += 1;
                false
            } else {
                mask >> bit & 1 == 1
            };
            if keep {
                kept += 1;
                continue;
            }
            removed += 1;
            let MSlot::Idle(obj) = std::mem::replace(&mut self.slots[slot], MSlot::Busy) else {
                unreachable!()
            };
            if take {
                self.detach_out(slot, obj);
            } else {
                self.drop_obj(slot, obj, Gone::RetainedOut);
            }
        }
        self.batch_wake(removed as u32);
        seen.sort();
        Outcome::Retained {
            kept,
            removed,
            panics,
            seen,
        }
    }

    fn add(&mut self) -> Outcome {
        let obj = self.new_obj();
        if self.closed || self.live() >= self.max_size {
            self.books.dropped += 1;
            return Outcome::Added(Err(if self.closed {
                Failure::Closed
            } else {
                Failure::NoCapacity
            }));
        }
        let slot = self.claim();
        let mut obj = obj;
        obj.returned = Some(self.now);
        self.counts.created += 1;
        self.slots[slot] = MSlot::Idle(obj);
        Outcome::Added(Ok(()))
    }

    /// `dedicated()`: an object for the caller alone, never in the pool: no room, no stats
    /// (choice: nor the back-off, whose docs speak of the pool's creations), but panics count.
    fn dedicated(&mut self) -> Outcome {
        if self.closed {
            return Outcome::Dedicated(Err(Failure::Closed));
        }
        let result = match self.next_create() {
            CreateAct::Ok => Ok(()),
            CreateAct::Hang(ms) if ms < CREATE_TIMEOUT => Ok(()),
            CreateAct::Hang(_) => Err(Failure::Timeout(Step::Create)),
            CreateAct::Fail => Err(Failure::Create),
            CreateAct::PanicCall | CreateAct::PanicPoll => {
                self.counts.panics += 1;
                Err(Failure::Panicked(Step::Create))
            }
        };
        // Made as a `get` makes one: the `post_create` hook runs (but nothing is counted).
        let result = result.and_then(|()| self.made()).map(|obj| {
            // The driver drops it.
            self.books.dropped += 1;
            obj.id
        });
        Outcome::Dedicated(result)
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        for slot in 0..self.slots.len() {
            if matches!(self.slots[slot], MSlot::Idle(_)) {
                let MSlot::Idle(obj) = std::mem::replace(&mut self.slots[slot], MSlot::Busy) else {
                    unreachable!()
                };
                self.drop_obj(slot, obj, Gone::Surplus);
            }
        }
        // The background task ends without another round.
    }

    fn take(&mut self, h: usize) -> Outcome {
        let Some((slot, obj)) = self.holders[h].take() else {
            return Outcome::Nothing;
        };
        self.detach_out(slot, obj);
        self.wake();
        Outcome::Done
    }

    fn mark(&mut self, h: usize, mark: Mark) -> Outcome {
        let Some((_, obj)) = self.holders[h].as_mut() else {
            return Outcome::Nothing;
        };
        match mark {
            Mark::Broken => obj.broken = true,
            Mark::PanicBroken => obj.panic_broken = true,
            Mark::PanicDetach => obj.panic_detach = true,
            Mark::PanicDrop => obj.panic_drop = true,
        }
        Outcome::Done
    }

    /// Applies a non-`get` op; `None` for the `get`s (the driver runs them with their hook).
    fn apply(&mut self, op: Op) -> Outcome {
        match op {
            Op::Get(kind) => {
                if self.free_holder().is_none() {
                    return Outcome::Nothing;
                }
                self.get(kind, None)
            }
            Op::GetWhileReturning(kind, h) => self.get(kind, Some(h)),
            Op::Return(h) => {
                if self.holders[h].is_none() {
                    return Outcome::Nothing;
                }
                self.return_object(h, false);
                Outcome::Done
            }
            Op::Take(h) => self.take(h),
            Op::Mark(h, mark) => self.mark(h, mark),
            Op::ScriptCreate(act) => {
                if self.creates.len() < MAX_SCRIPT {
                    self.creates.push_back(act);
                }
                Outcome::Done
            }
            Op::ScriptRecycle(act) => {
                if self.recycles.len() < MAX_SCRIPT {
                    self.recycles.push_back(act);
                }
                Outcome::Done
            }
            Op::ScriptHook(kind, act) => {
                let queue = &mut self.hooks[kind as usize];
                if queue.len() < MAX_SCRIPT {
                    queue.push_back(act);
                }
                Outcome::Done
            }
            Op::Advance(steps) => {
                self.now += u64::from(steps) * nanos(STEP);
                Outcome::Done
            }
            Op::Reap => Outcome::Count(self.reap()),
            Op::Prewarm => Outcome::Count(self.top_up()),
            Op::Resize(n) => {
                self.resize(n);
                Outcome::Done
            }
            Op::Retain {
                mask,
                panic_at,
                take,
            } => self.retain(mask, panic_at, take),
            Op::Add => self.add(),
            Op::Dedicated => self.dedicated(),
            Op::Close => {
                self.close();
                Outcome::Done
            }
        }
    }
}

/// How far one `get` went, for the counters.
struct Run {
    /// Counted in `gets`.
    started: bool,
    /// It waited (served: `gets_waited`).
    waited: bool,
}

// ---------------------------------------------------------------------------------------------
// The driver.

type GetFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Object<Scripted>, PoolError<FuzzError>>> + 'a>>;

fn get_future(pool: &Pool<Scripted>, kind: GetKind) -> GetFuture<'_> {
    match kind {
        GetKind::Get => Box::pin(pool.get()),
        GetKind::TryGet => Box::pin(pool.try_get()),
        GetKind::Within(ms) => Box::pin(pool.get_timeout(Duration::from_millis(ms))),
    }
}

/// The pool, its runtime and clock, what the driver holds, and the manager's books.
struct Driver {
    runtime: tokio::runtime::Runtime,
    mock: slotpool::MockClock,
    pool: Pool<Scripted>,
    ledger: Arc<Ledger>,
    holders: Vec<Option<Object<Scripted>>>,
    /// What the pool exported: this thread's recorder for the whole run (each wait's sample
    /// as it ends), and each check exports `stats()` under it.
    #[cfg(feature = "metrics")]
    exported: Arc<crate::capture::Capture>,
}

impl Driver {
    /// Lets everything an op left running end (see `SETTLE`).
    fn settle(&self) {
        self.runtime
            .block_on(async { tokio::time::sleep(SETTLE).await });
    }

    /// The pool's create calls and `paused`, for [`Model::settle`].
    fn seen(&self) -> (u64, u64) {
        (
            self.ledger.create_calls.load(Ordering::SeqCst),
            self.pool.stats().paused,
        )
    }

    fn now(&self) -> slotpool::Instant {
        self.pool.clock().now()
    }

    /// Drops an object the caller owns (taken out of the pool), quietly.
    fn drop_owned(mut conn: Conn) {
        conn.panic_drop = false;
        drop(conn);
    }

    /// Runs a `get` of `kind`; `returning`: an object returned at its first suspension (or
    /// after it, if it never suspends).
    fn get(
        &mut self,
        kind: GetKind,
        returning: Option<usize>,
    ) -> (Outcome, Option<PoolError<FuzzError>>) {
        let returning = returning.and_then(|h| self.holders[h].take());
        let pool = &self.pool;
        let result = self.runtime.block_on(async move {
            let mut get = std::pin::pin!(tokio::time::timeout(WATCHDOG, get_future(pool, kind)));
            let first = std::future::poll_fn(|cx| Poll::Ready(get.as_mut().poll(cx))).await;
            match first {
                Poll::Ready(result) => {
                    drop(returning);
                    result
                }
                Poll::Pending => {
                    drop(returning);
                    get.await
                }
            }
        });
        match result {
            Err(_) => (Outcome::Hung, None),
            Ok(Ok(object)) => {
                let seen = seen_object(&object, self.now());
                let Some(h) = self.holders.iter().position(Option::is_none) else {
                    panic!("no free holder for the object served");
                };
                self.holders[h] = Some(object);
                (Outcome::Got(seen), None)
            }
            Ok(Err(error)) => (Outcome::Failed(failure(&error)), Some(error)),
        }
    }

    fn apply(&mut self, op: Op) -> (Outcome, Option<PoolError<FuzzError>>) {
        let outcome = match op {
            Op::Get(kind) => {
                if !self.holders.iter().any(Option::is_none) {
                    return (Outcome::Nothing, None);
                }
                return self.get(kind, None);
            }
            Op::GetWhileReturning(kind, h) => return self.get(kind, Some(h)),
            Op::Return(h) => match self.holders[h].take() {
                Some(object) => {
                    drop(object);
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            Op::Take(h) => match self.holders[h].take() {
                Some(object) => {
                    Self::drop_owned(Object::take(object));
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            Op::Mark(h, mark) => match self.holders[h].as_mut() {
                Some(object) => {
                    let conn: &mut Conn = object;
                    match mark {
                        Mark::Broken => conn.broken = true,
                        Mark::PanicBroken => conn.panic_broken = true,
                        Mark::PanicDetach => conn.panic_detach = true,
                        Mark::PanicDrop => conn.panic_drop = true,
                    }
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            Op::ScriptCreate(act) => {
                let mut creates = self.ledger.creates.lock().unwrap();
                if creates.len() < MAX_SCRIPT {
                    creates.push_back(act);
                }
                Outcome::Done
            }
            Op::ScriptRecycle(act) => {
                let mut recycles = self.ledger.recycles.lock().unwrap();
                if recycles.len() < MAX_SCRIPT {
                    recycles.push_back(act);
                }
                Outcome::Done
            }
            Op::ScriptHook(kind, act) => {
                let mut queue = self.ledger.hooks[kind as usize].lock().unwrap();
                if queue.len() < MAX_SCRIPT {
                    queue.push_back(act);
                }
                Outcome::Done
            }
            Op::Advance(steps) => {
                self.mock.advance(STEP * steps);
                Outcome::Done
            }
            Op::Reap => Outcome::Count(self.pool.reap(self.now())),
            Op::Prewarm => {
                let pool = &self.pool;
                Outcome::Count(self.runtime.block_on(async {
                    tokio::time::timeout(WATCHDOG, pool.prewarm())
                        .await
                        .expect("prewarm ends")
                }))
            }
            Op::Resize(n) => {
                if let Err(error) = self.pool.resize(n) {
                    panic!("resize({n}) refused: {error}");
                }
                Outcome::Done
            }
            Op::Retain {
                mask,
                panic_at,
                take,
            } => {
                let now = self.now();
                let mut seen = Vec::new();
                let keep = |conn: &Conn, meta: Meta| {
                    seen.push(seen_meta(conn.id, usize::MAX, &meta, now));
                    let bit = conn.id % 8;
                    if panic_at == Some(bit) {
                        panic!("{INJECTED}");
                    }
                    mask >> bit & 1 == 1
                };
                let (kept, removed, panics) = if take {
                    let taken = self.pool.retain_and_take(keep);
                    let removed = taken.removed.len();
                    for conn in taken.removed {
                        Self::drop_owned(conn);
                    }
                    (taken.kept, removed, taken.panics)
                } else {
                    let retained = self.pool.retain(keep);
                    (retained.kept, retained.dropped, retained.panics)
                };
                seen.sort();
                Outcome::Retained {
                    kept,
                    removed,
                    panics,
                    seen,
                }
            }
            Op::Add => {
                let conn = self.ledger.conn();
                Outcome::Added(match self.pool.add(conn) {
                    Ok(()) => Ok(()),
                    Err(error) => {
                        let failure = match &error {
                            AddError::Closed(_) => Failure::Closed,
                            AddError::NoCapacity(_) => Failure::NoCapacity,
                            other => panic!("an add failure the model does not know: {other}"),
                        };
                        Self::drop_owned(error.into_inner());
                        Err(failure)
                    }
                })
            }
            Op::Dedicated => {
                let pool = &self.pool;
                let result = self.runtime.block_on(async {
                    tokio::time::timeout(WATCHDOG, pool.dedicated())
                        .await
                        .expect("dedicated ends")
                });
                Outcome::Dedicated(match result {
                    Ok(conn) => {
                        let id = conn.id;
                        Self::drop_owned(conn);
                        Ok(id)
                    }
                    Err(error) => {
                        assert!(error.reach().retry_is_safe(), "{error:?}: a retry is safe");
                        Err(failure(&error))
                    }
                })
            }
            Op::Close => {
                self.pool.close();
                Outcome::Done
            }
        };
        (outcome, None)
    }
}

/// Runs one op sequence; panics on the first divergence between the pool and the model.
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
    let manager = Scripted {
        ledger: Arc::clone(&ledger),
    };
    let (clock, mock) = slotpool::Clock::mock();
    // The pool records each wait through the recorder current when the wait ends (a lookup
    // by name each time), so the capture is this thread's recorder for the whole run.
    #[cfg(feature = "metrics")]
    let exported = Arc::new(crate::capture::Capture::default());
    #[cfg(feature = "metrics")]
    let _recorder = metrics::set_default_local_recorder(&*exported);
    let pool = {
        let _enter = runtime.enter();
        cfg.build(manager, clock)
    };
    let mut driver = Driver {
        runtime,
        mock,
        pool,
        ledger,
        holders: (0..HOLDERS).map(|_| None).collect(),
        #[cfg(feature = "metrics")]
        exported: Arc::clone(&exported),
    };
    let mut model = Model::new(cfg);
    let mut ops: Vec<Op> = Vec::new();
    // `MANAGED_MODEL_TRACE=1` prints every op, its outcome and the model after it.
    let trace = std::env::var_os("MANAGED_MODEL_TRACE").is_some();

    driver.settle();
    model.settle(driver.seen());
    check(&cfg, &ops, &driver, &model);

    while ops.len() < MAX_OPS && !bytes.is_empty() {
        let held: Vec<usize> = (0..HOLDERS)
            .filter(|&h| model.holders[h].is_some())
            .collect();
        let op = decode(&mut bytes, &cfg, &held);
        ops.push(op);
        model.held_back = None;
        let want = model.apply(op);
        let (got, error) = driver.apply(op);
        if let Some(error) = &error {
            assert!(
                error.reach().retry_is_safe(),
                "{}: {error:?}: every PoolError is NotSent",
                trail(&cfg, &ops)
            );
        }
        if got != want {
            panic!(
                "{}\n  pool:  {got:?}\n  model: {want:?}\n{}",
                trail(&cfg, &ops),
                model.dump()
            );
        }
        if let Some(PoolError::Unavailable { retry_after }) = error {
            check_retry_after(&cfg, &ops, &mut model, nanos(retry_after));
        }
        driver.settle();
        model.settle(driver.seen());
        if trace {
            eprintln!("{}: {op:?} -> {got:?}\n{}", ops.len() - 1, model.dump());
        }
        check(&cfg, &ops, &driver, &model);
    }

    // The end: close, everything held comes back, and every object is dropped exactly once.
    ops.push(Op::Close);
    driver.pool.close();
    model.close();
    for h in 0..HOLDERS {
        drop(driver.holders[h].take());
        model.return_object(h, false);
    }
    driver.settle();
    model.settle(driver.seen());
    check(&cfg, &ops, &driver, &model);
    let made = driver.ledger.made.load(Ordering::SeqCst);
    let dropped = driver.ledger.dropped.load(Ordering::SeqCst);
    assert_eq!(
        made,
        dropped,
        "{}: after close every object is dropped",
        trail(&cfg, &ops)
    );
}

/// The `pool` label the driver exports `stats()` under (the pool itself has no `name`, so its
/// wait histogram is labelled `pool = "default"`).
#[cfg(feature = "metrics")]
const EXPORTED_AS: &str = "fuzz";

/// What the pool's `stats()` exports (`slotpool::metrics::Export`, under the driver's capture),
/// against the model: the five `Status` gauges, every counter the model keeps (`wait_nanoseconds`
/// is its zero `wait_time`), and the samples of `slotpool_managed_wait_seconds` (one per wait
/// that ended: its `waits`, no caller waiting between ops). Left out: `held_too_long` and
/// `hold_nanoseconds`, which the model does not track (the driver never turns the hold watch
/// on). The first metric that differs, described.
#[cfg(feature = "metrics")]
fn exported_mismatch(driver: &Driver, model: &Model) -> Option<String> {
    use slotpool::metrics::Export;
    let exported = &driver.exported;
    metrics::with_local_recorder(&**exported, || driver.pool.stats().export(EXPORTED_AS));
    let live = model.live();
    let idle = model.idle();
    let gauges = [
        ("max_size", model.max_size),
        ("size", live),
        ("available", idle),
        ("in_use", live - idle),
        ("waiting", 0),
    ];
    for (name, want) in gauges {
        let metric = format!("slotpool_managed_{name}{{pool={EXPORTED_AS}}}");
        let got = exported.gauge(&metric);
        if got != want as f64 {
            return Some(format!("exported {metric}: pool {got}, model {want}"));
        }
    }
    let c = &model.counts;
    let counters = [
        ("gets", c.gets),
        ("gets_direct", c.gets_direct),
        ("gets_waited", c.gets_waited),
        ("gets_timed_out", c.gets_timed_out),
        ("checkouts", c.checkouts),
        ("waits", c.waits),
        ("wait_nanoseconds", 0),
        ("created", c.created),
        ("created_off_caller", c.created_off_caller),
        ("create_failures", c.create_failures),
        ("recycled", c.recycled),
        ("discarded", c.discarded),
        ("broken", c.broken),
        ("expired", c.expired),
        ("reaped", c.reaped),
        ("surplus", c.surplus),
        ("retained_out", c.retained_out),
        ("detached", c.detached),
        ("panics", c.panics),
        ("paused", c.paused),
    ];
    for (name, want) in counters {
        let metric = format!("slotpool_managed_{name}_total{{pool={EXPORTED_AS}}}");
        let got = exported.counter(&metric);
        if got != want {
            return Some(format!("exported {metric}: pool {got}, model {want}"));
        }
    }
    let metric = "slotpool_managed_wait_seconds{pool=default}";
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

/// `Unavailable`'s `retry_after`: the whole pause is ahead (the clock has not moved since it
/// began), so it lies between half the pause's length and all of it, the same for every
/// caller that meets that pause.
fn check_retry_after(cfg: &Cfg, ops: &[Op], model: &mut Model, retry_after: u64) {
    let Some(held) = model.held_back else {
        panic!("{}: the model held nothing back", trail(cfg, ops));
    };
    assert!(
        held.len / 2 <= retry_after && retry_after <= held.len,
        "{}: retry_after {retry_after} ns for a pause of {} ns",
        trail(cfg, ops),
        held.len
    );
    if let Some(seen) = held.seen {
        assert_eq!(
            retry_after,
            seen,
            "{}: the same pause answers the same retry_after",
            trail(cfg, ops)
        );
    }
    if let Breaker::Paused { seen, .. } = &mut model.breaker {
        *seen = Some(retry_after);
    }
}

fn check(cfg: &Cfg, ops: &[Op], driver: &Driver, model: &Model) {
    let pool = &driver.pool;
    let stats = pool.stats();
    let status = pool.status();
    let live = model.live();
    let idle = model.idle();
    let c = &model.counts;
    let ledger = &driver.ledger;
    let rows: [(&str, u64, u64); 32] = [
        (
            "status.max_size",
            status.max_size as u64,
            model.max_size as u64,
        ),
        ("status.size", status.size as u64, live as u64),
        ("status.available", status.available as u64, idle as u64),
        ("status.in_use", status.in_use as u64, (live - idle) as u64),
        ("status.waiting", status.waiting as u64, 0),
        ("stats.status.size", stats.status.size as u64, live as u64),
        ("gets", stats.gets, c.gets),
        ("gets_direct", stats.gets_direct, c.gets_direct),
        ("gets_waited", stats.gets_waited, c.gets_waited),
        ("gets_timed_out", stats.gets_timed_out, c.gets_timed_out),
        ("checkouts", stats.checkouts, c.checkouts),
        ("waits", stats.waits, c.waits),
        (
            "wait_time (mock clock, never moved by a wait)",
            nanos(stats.wait_time),
            0,
        ),
        ("created", stats.created, c.created),
        (
            "created_off_caller",
            stats.created_off_caller,
            c.created_off_caller,
        ),
        ("create_failures", stats.create_failures, c.create_failures),
        ("recycled", stats.recycled, c.recycled),
        ("discarded", stats.discarded, c.discarded),
        ("broken", stats.broken, c.broken),
        ("expired", stats.expired, c.expired),
        ("reaped", stats.reaped, c.reaped),
        ("surplus", stats.surplus, c.surplus),
        ("retained_out", stats.retained_out, c.retained_out),
        ("detached", stats.detached, c.detached),
        ("panics", stats.panics, c.panics),
        ("paused", stats.paused, c.paused),
        (
            "manager: objects made",
            ledger.made.load(Ordering::SeqCst),
            model.books.made,
        ),
        (
            "manager: objects dropped",
            ledger.dropped.load(Ordering::SeqCst),
            model.books.dropped,
        ),
        (
            "manager: detach calls",
            ledger.detaches.load(Ordering::SeqCst),
            model.books.detaches,
        ),
        (
            "manager: create calls",
            ledger.create_calls.load(Ordering::SeqCst),
            model.books.create_calls,
        ),
        (
            "manager: recycle calls",
            ledger.recycle_calls.load(Ordering::SeqCst),
            model.books.recycle_calls,
        ),
        (
            "hook calls",
            ledger.hook_calls.load(Ordering::SeqCst),
            model.books.hook_calls,
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
    let now = driver.now();
    for h in 0..HOLDERS {
        let got = driver.holders[h]
            .as_ref()
            .map(|object| seen_object(object, now));
        let want = model.holders[h]
            .as_ref()
            .map(|(slot, obj)| model.seen(*slot, obj));
        if got != want {
            panic!(
                "{}\n  holder {h}: pool {got:?}, model {want:?}\n{}",
                trail(cfg, ops),
                model.dump()
            );
        }
    }
}
