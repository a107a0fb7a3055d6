//! Differential driver for `slotpool::keyed::Keyed`: decodes a registry's configuration and a
//! sequence of operations from bytes, runs each operation on a real registry single-threaded
//! (a current-thread tokio runtime with a paused clock that the driver moves by hand, a mock
//! mock clock, closures that block on the blocking pool until the driver lets them end, and
//! then return or panic) and on a plain sequential model, and panics on the first difference
//! in an outcome (the error's variant, its key and its `reach()`), in `stats()` (every key, in
//! registration order), `shares()`, `total_shares()`, `share_of` and `stats_for` of every key
//! of the universe, in an admission held by the driver, or in the closures' own books.
//!
//! # The model
//!
//! Written from the keyed module's documentation (the module docs, `KeyedBuilder`, `Keyed`'s
//! methods, `KeyStats`, `KeyedError`, `BuildError`, `Admission`, `docs/pinned.md`), not
//! from its code. It holds the shares (their slots and slots in use), the caller keys (their
//! share, their counters) in registration order, whether the registry is closed, the
//! admissions the driver holds and the closures running. By the docs' words:
//!
//! * A call with a key that is neither a share nor an alias is refused `Unregistered`; after
//!   `close`, `Closed`; with a free slot in its share (an alias draws from the share it names,
//!   so aliases and their share use one budget), admitted at once; with the share full, it
//!   waits up to `max_wait` (counted in `waits`, whatever the end), and is `Refused` (counted
//!   in `refusals`) unless a slot of its share frees meanwhile (it takes that slot) or the
//!   registry closes (`Closed`). A zero `max_wait` refuses a call that finds its share full
//!   without its waiting any time. Every refusal is `Reach::NotSent` and names the caller's key.
//! * `mutate` and `read` run their closure on the blocking pool holding the slot until the
//!   closure ends, whatever the caller does: a caller that stops waiting (its task aborted)
//!   leaves the slot taken until the closure returns. A closure's panic is caught: the call
//!   ends `Panicked` (a mutation `MaybeApplied`, a read `NotSent`) and the caller key's
//!   `panics` goes up; the slot is freed.
//! * Run-time registration (`register`, `register_default`, `register_alias`): refused with
//!   `Duplicate` for a key already registered, `UnknownShare` for an alias of a key that is
//!   not a share, `InvalidShare` for a zero share, `DoesNotFit` when the sum of the distinct
//!   shares plus the reserved threads would pass the thread limit; a refused registration
//!   leaves no trace.
//! * Statistics: per caller key its share, the share's slots in use and capacity, the calls
//!   waiting (none between ops), refusals, panics, waits and their time (zero: waits run on
//!   tokio's clock, the registry times them on the mock, which no wait moves).
//! * Metrics (with the `metrics` feature): per caller key `slotpool_keyed_refusals_total` and
//!   `slotpool_keyed_panics_total` as its refusals and panics, the `slotpool_keyed_in_use`
//!   gauge as its own admissions held and closures running, one `slotpool_keyed_wait_seconds`
//!   sample per wait.
//!
//! Not modelled: `Lost` (a runtime shutting down under a call), spans and logs,
//! builder errors (every configuration decoded here builds; the run-time registrations
//! exercise the same checks), more than one caller waiting at a time.
//!
//! Where the docs leave a choice open, the model takes one and says so at the spot
//! ("Choice:").
//!
//! Shared by the `keyed_ops` fuzz target and by `cargo test` (`core/tests/
//! keyed_fuzz_replay.rs` includes this file with `#[path]`; it refers to the byte reader as
//! `crate::bytes`, which both crates provide at their root).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use slotpool::keyed::{Admission, BuildError, Keyed, KeyedError};
use slotpool::Reach;

use crate::bytes::Bytes;

/// The keys the ops choose from.
const KEYS: [&str; 6] = ["a", "b", "c", "x", "y", "z"];
/// Admissions the driver holds at most.
const HOLDERS: usize = 6;
/// Closures running at most.
const TASKS: usize = 4;
/// Longest op sequence decoded from one input.
const MAX_OPS: usize = 300;
/// `admit` wait bounds (tokio's paused clock, milliseconds).
const WAITS: [u64; 4] = [0, 3, 13, 33];
/// The wait bound of `mutate` and `read`.
const RUN_WAIT: u64 = 7;
/// How long (real time) the driver waits for a blocking thread to start or end a closure.
const REAL_WAIT: Duration = Duration::from_secs(20);

type Key = &'static str;

/// Marks the panics this driver injects (which the registry must contain).
const INJECTED: &str = "injected by keyed_ops";

// ---------------------------------------------------------------------------------------------
// The configuration and the ops.

#[derive(Debug, Clone, Copy)]
struct Cfg {
    default_share: usize,
    /// The builder's shares, in order: key index and explicit size (`None`: the default).
    shares: [Option<Option<usize>>; 3],
    /// The builder's aliases: `x` and `y` to a builder share, if any.
    aliases: [Option<usize>; 2],
    reserved: usize,
    /// Threads beyond what the builder's shares and the reserved threads need.
    slack: usize,
}

impl Cfg {
    fn decode(bytes: &mut Bytes<'_>) -> Self {
        let default_share = 1 + bytes.below(3);
        let b = bytes.byte();
        // "a" is always a share; "b" and "c" are in one configuration in two.
        let size = |b: u8| match b % 4 {
            0 => None,
            n => Some(usize::from(n)),
        };
        let shares = [
            Some(size(b)),
            (b & 4 != 0).then_some(size(b >> 3)),
            (b & 32 != 0).then_some(size(b >> 6)),
        ];
        let b = bytes.byte();
        let registered = |i: usize| shares[i].is_some();
        let target = |b: u8| {
            let i = usize::from(b % 3);
            if registered(i) {
                i
            } else {
                0
            }
        };
        let aliases = [
            (b & 4 != 0).then(|| target(b)),
            (b & 8 != 0).then(|| target(b >> 4)),
        ];
        let b = bytes.byte();
        Cfg {
            default_share,
            shares,
            aliases,
            reserved: usize::from(b % 3),
            slack: usize::from((b / 3) % 5),
        }
    }

    fn builder_total(&self) -> usize {
        self.shares
            .iter()
            .flatten()
            .map(|size| size.unwrap_or(self.default_share))
            .sum()
    }

    fn max_threads(&self) -> usize {
        self.builder_total() + self.reserved + self.slack
    }

    fn build(&self, clock: slotpool::Clock) -> Keyed<Key> {
        let mut builder = Keyed::builder()
            .default_share(self.default_share)
            .max_blocking_threads(self.max_threads())
            .reserved_threads(self.reserved)
            .clock(clock);
        for (i, share) in self.shares.iter().enumerate() {
            builder = match share {
                Some(Some(size)) => builder.share(KEYS[i], *size),
                Some(None) => builder.family(KEYS[i]),
                None => builder,
            };
        }
        for (j, alias) in self.aliases.iter().enumerate() {
            if let Some(share) = alias {
                builder = builder.alias(KEYS[3 + j], KEYS[*share]);
            }
        }
        match builder.build() {
            Ok(keyed) => keyed,
            Err(error) => panic!("valid configuration {self:?} refused: {error}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Mutation,
    Read,
}

/// What happens at an admission's first suspension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meanwhile {
    Nothing,
    /// Holder `h`'s admission is dropped.
    Release(usize),
    /// Running closure `t` is let go (it returns).
    Finish(usize),
    Close,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// `admit(key, WAITS[w] ms)`, with something happening at its first suspension.
    Admit(usize, u64, Meanwhile),
    /// Drops holder `h`'s admission.
    Release(usize),
    /// `mutate` or `read` on a spawned task, its closure blocked until let go; `panics`: the
    /// closure panics when let go.
    Spawn(usize, Effect, bool),
    /// Lets running closure `t` end and awaits its call's outcome (unless its caller left).
    Finish(usize),
    /// Aborts the task awaiting closure `t` (the closure runs on).
    Abandon(usize),
    /// `register(key, size)`, or `register_default(key)` for `None`.
    Register(usize, Option<usize>),
    RegisterAlias(usize, usize),
    Close,
}

fn decode_meanwhile(b: u8, held: &[usize], running: &[usize]) -> Meanwhile {
    let pick = |list: &[usize]| list.get(usize::from(b / 8) % list.len().max(1)).copied();
    match b % 8 {
        0..=3 => pick(held).map_or(Meanwhile::Nothing, Meanwhile::Release),
        4 => pick(running).map_or(Meanwhile::Nothing, Meanwhile::Finish),
        5 if b >= 200 => Meanwhile::Close,
        _ => Meanwhile::Nothing,
    }
}

fn decode(bytes: &mut Bytes<'_>, held: &[usize], running: &[usize]) -> Op {
    let op = bytes.byte();
    let pick = |list: &[usize], b: u8| {
        if list.is_empty() {
            0
        } else {
            list[usize::from(b) % list.len()]
        }
    };
    match op % 16 {
        0..=3 => {
            let key = bytes.below(KEYS.len());
            let b = bytes.byte();
            let wait = WAITS[usize::from(b % 4)];
            Op::Admit(key, wait, decode_meanwhile(b / 4, held, running))
        }
        4..=6 => Op::Release(pick(held, bytes.byte())),
        7 | 8 => {
            let key = bytes.below(KEYS.len());
            let effect = if op & 16 == 0 {
                Effect::Mutation
            } else {
                Effect::Read
            };
            Op::Spawn(key, effect, op & 32 != 0)
        }
        9 | 10 => Op::Finish(pick(running, bytes.byte())),
        11 => Op::Abandon(pick(running, bytes.byte())),
        12 | 13 => {
            let key = bytes.below(KEYS.len());
            let b = bytes.byte();
            let size = match b % 5 {
                0 => None,
                n => Some(usize::from(n) - 1),
            };
            Op::Register(key, size)
        }
        14 => {
            let alias = bytes.below(KEYS.len());
            Op::RegisterAlias(alias, bytes.below(KEYS.len()))
        }
        _ if op >= 240 => Op::Close,
        _ => Op::Release(pick(held, bytes.byte())),
    }
}

// ---------------------------------------------------------------------------------------------
// Outcomes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Refused { waited: u64 },
    Closed,
    Unregistered,
    Panicked,
    Lost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigFailure {
    Duplicate,
    InvalidShare,
    UnknownShare,
    DoesNotFit,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Admitted: the admission's capacity and in-use count.
    Admitted {
        capacity: usize,
        in_use: usize,
    },
    /// A spawned call's closure started.
    Started,
    /// A call's value came back.
    Value(u64),
    /// An error: its variant, key and reach.
    Failed(Failure, Key, Reach),
    Registered(Result<(), ConfigFailure>),
    Nothing,
    Done,
}

fn failure(error: &KeyedError<Key>) -> Outcome {
    let variant = match error {
        KeyedError::Refused { waited, .. } => Failure::Refused {
            waited: waited.as_millis() as u64,
        },
        KeyedError::Closed { .. } => Failure::Closed,
        KeyedError::Unregistered { .. } => Failure::Unregistered,
        KeyedError::Panicked { .. } => Failure::Panicked,
        KeyedError::Lost { .. } => Failure::Lost,
        other => panic!("an error the model does not know: {other:?}"),
    };
    Outcome::Failed(variant, error.key(), error.reach())
}

fn config_failure(error: &BuildError<Key>) -> ConfigFailure {
    match error {
        BuildError::Duplicate { .. } => ConfigFailure::Duplicate,
        BuildError::InvalidShare { .. } => ConfigFailure::InvalidShare,
        BuildError::UnknownShare { .. } => ConfigFailure::UnknownShare,
        BuildError::DoesNotFit { .. } => ConfigFailure::DoesNotFit,
        _ => ConfigFailure::Other,
    }
}

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone)]
struct MShare {
    key: Key,
    capacity: usize,
    in_use: usize,
}

#[derive(Debug, Clone)]
struct MKey {
    key: Key,
    /// Index into `shares`.
    share: usize,
    refusals: u64,
    panics: u64,
    waits: u64,
}

/// An admission that ended without a slot: its outcome, and what was to happen at its first
/// suspension if it never suspended.
struct Unserved {
    outcome: Outcome,
    pending: Option<Meanwhile>,
}

impl Unserved {
    /// Refused within its first poll: what was to happen meanwhile happens after.
    fn now(failure: Failure, key: Key, meanwhile: Meanwhile) -> Self {
        Unserved {
            outcome: Outcome::Failed(failure, key, Reach::NotSent),
            pending: Some(meanwhile),
        }
    }

    /// Refused after it waited (what was to happen meanwhile has happened).
    fn after(failure: Failure, key: Key) -> Self {
        Unserved {
            outcome: Outcome::Failed(failure, key, Reach::NotSent),
            pending: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct MTask {
    key: usize,
    share: usize,
    effect: Effect,
    panics: bool,
    /// Its caller left (the task was aborted).
    abandoned: bool,
    /// The value the closure returns.
    value: u64,
}

#[derive(Debug, Default, Clone)]
struct Books {
    started: u64,
    ended: u64,
    panicked: u64,
}

#[derive(Debug, Clone)]
struct Model {
    cfg: Cfg,
    shares: Vec<MShare>,
    /// Caller keys in registration order.
    keys: Vec<MKey>,
    closed: bool,
    /// The share and the caller key (an index of `keys`) of each admission held.
    holders: Vec<Option<(usize, usize)>>,
    tasks: Vec<Option<MTask>>,
    books: Books,
    values: u64,
}

impl Model {
    fn new(cfg: Cfg) -> Self {
        let mut model = Model {
            cfg,
            shares: Vec::new(),
            keys: Vec::new(),
            closed: false,
            holders: vec![None; HOLDERS],
            tasks: vec![None; TASKS],
            books: Books::default(),
            values: 0,
        };
        // Choice: the builder registers its shares, then its aliases, each in the order given
        // (the driver calls it in that order, so the docs' "registration order" is that).
        for (i, share) in cfg.shares.iter().enumerate() {
            if let Some(size) = share {
                model.add_share(KEYS[i], size.unwrap_or(cfg.default_share));
            }
        }
        for (j, alias) in cfg.aliases.iter().enumerate() {
            if let Some(share) = alias {
                model.add_alias(KEYS[3 + j], KEYS[*share]);
            }
        }
        model
    }

    fn dump(&self) -> String {
        format!(
            "model: closed {}\n  shares {:?}\n  keys {:?}\n  holders {:?}\n  tasks {:?}\n  {:?}",
            self.closed, self.shares, self.keys, self.holders, self.tasks, self.books
        )
    }

    fn find(&self, key: Key) -> Option<usize> {
        self.keys.iter().position(|k| k.key == key)
    }

    fn add_share(&mut self, key: Key, capacity: usize) {
        self.shares.push(MShare {
            key,
            capacity,
            in_use: 0,
        });
        self.keys.push(MKey {
            key,
            share: self.shares.len() - 1,
            refusals: 0,
            panics: 0,
            waits: 0,
        });
    }

    fn add_alias(&mut self, alias: Key, share: Key) {
        let share = self
            .shares
            .iter()
            .position(|s| s.key == share)
            .expect("model: an alias of a share");
        self.keys.push(MKey {
            key: alias,
            share,
            refusals: 0,
            panics: 0,
            waits: 0,
        });
    }

    /// Slots in use by caller key `k`: its admissions held and its closures running.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn key_in_use(&self, k: usize) -> usize {
        let held = self.holders.iter().flatten().filter(|(_, key)| *key == k);
        let running = self
            .tasks
            .iter()
            .flatten()
            .filter(|task| task.key == k && task.share != usize::MAX);
        held.count() + running.count()
    }

    fn total(&self) -> usize {
        self.shares.iter().map(|s| s.capacity).sum()
    }

    fn has_room(&self, share: usize) -> bool {
        self.shares[share].in_use < self.shares[share].capacity
    }

    fn admitted(&mut self, share: usize) -> Outcome {
        let s = &mut self.shares[share];
        s.in_use += 1;
        Outcome::Admitted {
            capacity: s.capacity,
            in_use: s.in_use,
        }
    }

    /// A slot of `share` freed (an admission dropped, a closure ended).
    fn free(&mut self, share: usize) {
        self.shares[share].in_use -= 1;
    }

    /// What happens at an admission's first suspension; `Some(share)` if it freed a slot of
    /// that share.
    fn meanwhile(&mut self, what: Meanwhile) -> Option<usize> {
        match what {
            Meanwhile::Nothing => None,
            Meanwhile::Release(h) => {
                let (share, _) = self.holders[h].take()?;
                self.free(share);
                Some(share)
            }
            Meanwhile::Finish(t) => {
                let share = self.tasks[t]?.share;
                // The closure's outcome is collected by a later `Finish` op; the slot frees now.
                self.end_closure(t);
                Some(share)
            }
            Meanwhile::Close => {
                self.closed = true;
                None
            }
        }
    }

    /// Closure `t` ends: its slot is freed; a panic is counted for its caller key (choice
    /// where its caller left: the docs count "calls with this caller key whose closure
    /// panicked", whoever waits for them).
    fn end_closure(&mut self, t: usize) {
        let Some(task) = self.tasks[t].as_mut() else {
            return;
        };
        if task.share == usize::MAX {
            return;
        }
        let share = task.share;
        task.share = usize::MAX;
        let (key, panics) = (task.key, task.panics);
        self.books.ended += 1;
        if panics {
            // Counted whether or not the caller still waits for the outcome.
            self.books.panicked += 1;
            self.keys[key].panics += 1;
        }
        self.free(share);
    }

    /// One admission of `key` with wait bound `wait` (ms); `meanwhile` happens at its first
    /// suspension (or after it, if it never suspends). `Ok(share)` when admitted.
    fn admit(&mut self, key: Key, wait: u64, meanwhile: Meanwhile) -> Result<usize, Outcome> {
        match self.admit_inner(key, wait, meanwhile) {
            Ok(share) => Ok(share),
            Err(Unserved { outcome, pending }) => {
                if let Some(what) = pending {
                    self.meanwhile(what);
                }
                Err(outcome)
            }
        }
    }

    fn admit_inner(
        &mut self,
        key: Key,
        wait: u64,
        meanwhile: Meanwhile,
    ) -> Result<usize, Unserved> {
        let Some(k) = self.find(key) else {
            return Err(Unserved::now(Failure::Unregistered, key, meanwhile));
        };
        if self.closed {
            return Err(Unserved::now(Failure::Closed, key, meanwhile));
        }
        let share = self.keys[k].share;
        if self.has_room(share) {
            self.meanwhile(meanwhile);
            return Ok(share);
        }
        self.keys[k].waits += 1;
        let refused = Failure::Refused { waited: wait };
        if wait == 0 {
            // Refused within its first poll: it never suspends.
            self.keys[k].refusals += 1;
            return Err(Unserved::now(refused, key, meanwhile));
        }
        // It waits: what happens meanwhile happens now.
        self.meanwhile(meanwhile);
        if self.closed {
            return Err(Unserved::after(Failure::Closed, key));
        }
        if self.has_room(share) {
            return Ok(share);
        }
        self.keys[k].refusals += 1;
        Err(Unserved::after(refused, key))
    }

    fn apply(&mut self, op: Op) -> Outcome {
        match op {
            Op::Admit(key, wait, meanwhile) => {
                let Some(h) = self.holders.iter().position(Option::is_none) else {
                    return Outcome::Nothing;
                };
                match self.admit(KEYS[key], wait, meanwhile) {
                    Ok(share) => {
                        let k = self.find(KEYS[key]).expect("admitted, so registered");
                        self.holders[h] = Some((share, k));
                        self.admitted(share)
                    }
                    Err(outcome) => outcome,
                }
            }
            Op::Release(h) => match self.holders[h].take() {
                Some((share, _)) => {
                    self.free(share);
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            Op::Spawn(key, effect, panics) => {
                let Some(t) = self.tasks.iter().position(Option::is_none) else {
                    return Outcome::Nothing;
                };
                self.values += 1;
                match self.admit(KEYS[key], RUN_WAIT, Meanwhile::Nothing) {
                    Ok(share) => {
                        self.shares[share].in_use += 1;
                        self.books.started += 1;
                        self.tasks[t] = Some(MTask {
                            key: self.find(KEYS[key]).expect("admitted, so registered"),
                            share,
                            effect,
                            panics,
                            abandoned: false,
                            value: self.values,
                        });
                        Outcome::Started
                    }
                    Err(outcome) => outcome,
                }
            }
            Op::Finish(t) => {
                let Some(task) = self.tasks[t] else {
                    return Outcome::Nothing;
                };
                self.end_closure(t);
                self.tasks[t] = None;
                if task.abandoned {
                    return Outcome::Done;
                }
                if task.panics {
                    let reach = match task.effect {
                        Effect::Mutation => Reach::MaybeApplied,
                        Effect::Read => Reach::NotSent,
                    };
                    return Outcome::Failed(Failure::Panicked, self.keys[task.key].key, reach);
                }
                Outcome::Value(task.value)
            }
            Op::Abandon(t) => match self.tasks[t].as_mut() {
                Some(task) if task.share != usize::MAX => {
                    task.abandoned = true;
                    Outcome::Done
                }
                _ => Outcome::Nothing,
            },
            Op::Register(key, size) => Outcome::Registered(self.register(KEYS[key], size)),
            Op::RegisterAlias(alias, share) => {
                Outcome::Registered(self.register_alias(KEYS[alias], KEYS[share]))
            }
            Op::Close => {
                self.closed = true;
                Outcome::Done
            }
        }
    }

    /// Choice (the docs list the errors, not their order): a key already registered is a
    /// `Duplicate` first, then the fit is checked, then the size. Registration goes on after
    /// `close` (the docs close the shares to calls, not the registry to keys); a key
    /// registered then is closed to calls all the same.
    fn register(&mut self, key: Key, size: Option<usize>) -> Result<(), ConfigFailure> {
        let size = size.unwrap_or(self.cfg.default_share);
        if self.find(key).is_some() {
            return Err(ConfigFailure::Duplicate);
        }
        if self.total() + size + self.cfg.reserved > self.cfg.max_threads() {
            return Err(ConfigFailure::DoesNotFit);
        }
        if size == 0 {
            return Err(ConfigFailure::InvalidShare);
        }
        self.add_share(key, size);
        Ok(())
    }

    /// Choice: an alias must name a share key (an alias of an alias is `UnknownShare`).
    fn register_alias(&mut self, alias: Key, share: Key) -> Result<(), ConfigFailure> {
        if self.find(alias).is_some() {
            return Err(ConfigFailure::Duplicate);
        }
        if !self.shares.iter().any(|s| s.key == share) {
            return Err(ConfigFailure::UnknownShare);
        }
        self.add_alias(alias, share);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The driver.

/// A closure the driver runs on the blocking pool: it counts itself started, waits to be let
/// go, counts itself ended, then returns its value or panics.
struct Running {
    key: Key,
    /// Lets the closure go.
    go: mpsc::Sender<()>,
    /// The task awaiting the call's outcome (`None` once awaited).
    task: Option<tokio::task::JoinHandle<Result<u64, KeyedError<Key>>>>,
    /// The outcome, once awaited.
    result: Option<Result<u64, KeyedError<Key>>>,
    /// The caller left (its task was aborted).
    abandoned: bool,
    /// The closure was let go.
    let_go: bool,
}

/// The closures' own books.
#[derive(Debug, Default)]
struct Ledger {
    started: AtomicU64,
    ended: AtomicU64,
    panicked: AtomicU64,
}

/// Fields drop in order: the running closures are let go (their senders dropped) before the
/// runtime, whose drop waits for its blocking threads.
struct Driver {
    tasks: Vec<Option<Running>>,
    holders: Vec<Option<Admission>>,
    keyed: Arc<Keyed<Key>>,
    ledger: Arc<Ledger>,
    values: u64,
    runtime: tokio::runtime::Runtime,
    /// What the registry exported: each key's metric handles are registered with it.
    #[cfg(feature = "metrics")]
    exported: crate::capture::Capture,
}

type AdmitFuture<'a> = Pin<Box<dyn Future<Output = Result<Admission, KeyedError<Key>>> + 'a>>;

/// Polls a future once.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *future).poll(cx))).await
}

/// Spins (real time, bounded) until `done`.
fn spin_until(mut done: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while !done() {
        if start.elapsed() > REAL_WAIT {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

impl Driver {
    /// Runs what happens at an admission's first suspension.
    fn meanwhile(&mut self, what: Meanwhile) {
        match what {
            Meanwhile::Nothing => {}
            Meanwhile::Release(h) => drop(self.holders[h].take()),
            Meanwhile::Finish(t) => self.let_go(t),
            Meanwhile::Close => self.keyed.close(),
        }
    }

    /// Slots in use in `key`'s share now.
    fn in_use_of(&self, key: Key) -> usize {
        self.keyed.stats_for(&key).map_or(0, |stats| stats.in_use)
    }

    /// Lets closure `t` go and waits until its slot is free: a call still awaited ends (its
    /// outcome kept for `Finish`); an abandoned one's share shows one slot fewer in use.
    fn let_go(&mut self, t: usize) {
        let Some(running) = self.tasks[t].as_mut() else {
            return;
        };
        if running.let_go {
            return;
        }
        running.let_go = true;
        let key = running.key;
        let before = self.in_use_of(key);
        let _ = self.tasks[t].as_ref().map(|running| running.go.send(()));
        let Some(running) = self.tasks[t].as_mut() else {
            return;
        };
        match running.task.take() {
            Some(task) if !running.abandoned => {
                let result = self.runtime.block_on(task).expect("the call's task ends");
                running.result = Some(result);
            }
            _ => {
                let freed = spin_until(|| self.in_use_of(key) < before);
                assert!(freed, "an abandoned closure let go frees its slot");
            }
        }
    }

    /// Polls `admit` once; if it is pending, runs `meanwhile` and moves tokio's clock a
    /// millisecond at a time until it ends (the registry's waits run on tokio's timer).
    fn admit(
        &mut self,
        key: Key,
        wait: u64,
        meanwhile: Meanwhile,
    ) -> Result<Admission, KeyedError<Key>> {
        let keyed = Arc::clone(&self.keyed);
        let mut admit: AdmitFuture<'_> = Box::pin(keyed.admit(&key, Duration::from_millis(wait)));
        let first = self.runtime.block_on(poll_once(&mut admit));
        self.meanwhile(meanwhile);
        if let Poll::Ready(result) = first {
            return result;
        }
        for _ in 0..wait + 3 {
            if let Poll::Ready(result) = self.runtime.block_on(poll_once(&mut admit)) {
                return result;
            }
            self.runtime
                .block_on(tokio::time::advance(Duration::from_millis(1)));
        }
        panic!("admit({key:?}, {wait} ms) still pending past its wait bound");
    }

    fn spawn(&mut self, t: usize, key: Key, effect: Effect, panics: bool) -> Outcome {
        self.values += 1;
        let value = self.values;
        let (go, wait_go) = mpsc::channel::<()>();
        let ledger = Arc::clone(&self.ledger);
        let work = move || {
            ledger.started.fetch_add(1, Ordering::SeqCst);
            let _ = wait_go.recv();
            ledger.ended.fetch_add(1, Ordering::SeqCst);
            if panics {
                ledger.panicked.fetch_add(1, Ordering::SeqCst);
                panic!("{INJECTED}");
            }
            value
        };
        let started = self.ledger.started.load(Ordering::SeqCst);
        let keyed = Arc::clone(&self.keyed);
        let wait = Duration::from_millis(RUN_WAIT);
        let task = self.runtime.spawn(async move {
            match effect {
                Effect::Mutation => {
                    keyed
                        .mutate_in(&key, wait, tracing::Span::none(), work)
                        .await
                }
                Effect::Read => keyed.read_in(&key, wait, tracing::Span::none(), work).await,
            }
        });
        // Let the task try, moving tokio's clock through its wait bound: then it has either
        // ended (not run) or been admitted (its closure starts on a blocking thread).
        let ledger = Arc::clone(&self.ledger);
        let has_started = move || ledger.started.load(Ordering::SeqCst) > started;
        for _ in 0..RUN_WAIT + 3 {
            self.runtime.block_on(tokio::task::yield_now());
            if task.is_finished() || has_started() {
                break;
            }
            self.runtime
                .block_on(tokio::time::advance(Duration::from_millis(1)));
        }
        if task.is_finished() && !has_started() {
            let result = self.runtime.block_on(task).expect("the call's task ends");
            return match result {
                Ok(value) => Outcome::Value(value),
                Err(error) => failure(&error),
            };
        }
        assert!(spin_until(has_started), "an admitted closure starts");
        self.tasks[t] = Some(Running {
            key,
            go,
            task: Some(task),
            result: None,
            abandoned: false,
            let_go: false,
        });
        Outcome::Started
    }

    fn apply(&mut self, op: Op) -> Outcome {
        match op {
            Op::Admit(key, wait, meanwhile) => {
                let Some(h) = self.holders.iter().position(Option::is_none) else {
                    return Outcome::Nothing;
                };
                match self.admit(KEYS[key], wait, meanwhile) {
                    Ok(admission) => {
                        let outcome = Outcome::Admitted {
                            capacity: admission.capacity(),
                            in_use: admission.in_use(),
                        };
                        self.holders[h] = Some(admission);
                        outcome
                    }
                    Err(error) => failure(&error),
                }
            }
            Op::Release(h) => match self.holders[h].take() {
                Some(admission) => {
                    drop(admission);
                    Outcome::Done
                }
                None => Outcome::Nothing,
            },
            Op::Spawn(key, effect, panics) => {
                let Some(t) = self.tasks.iter().position(Option::is_none) else {
                    return Outcome::Nothing;
                };
                self.spawn(t, KEYS[key], effect, panics)
            }
            Op::Finish(t) => {
                if self.tasks[t].is_none() {
                    return Outcome::Nothing;
                }
                self.let_go(t);
                let Some(running) = self.tasks[t].take() else {
                    return Outcome::Nothing;
                };
                match running.result {
                    _ if running.abandoned => Outcome::Done,
                    Some(Ok(value)) => Outcome::Value(value),
                    Some(Err(error)) => failure(&error),
                    None => panic!("a call let go and awaited has an outcome"),
                }
            }
            Op::Abandon(t) => match self.tasks[t].as_mut() {
                Some(running) if !running.let_go => {
                    running.abandoned = true;
                    if let Some(task) = running.task.take() {
                        task.abort();
                        // The abort ends the awaiting task; the closure runs on.
                        let _ = self.runtime.block_on(task);
                    }
                    Outcome::Done
                }
                _ => Outcome::Nothing,
            },
            Op::Register(key, size) => Outcome::Registered(
                self.recorded(|| match size {
                    Some(size) => self.keyed.register(KEYS[key], size),
                    None => self.keyed.register_default(KEYS[key]),
                })
                .map_err(|error| config_failure(&error)),
            ),
            Op::RegisterAlias(alias, share) => Outcome::Registered(
                self.recorded(|| self.keyed.register_alias(KEYS[alias], KEYS[share]))
                    .map_err(|error| config_failure(&error)),
            ),
            Op::Close => {
                self.keyed.close();
                Outcome::Done
            }
        }
    }

    /// Runs `f` with the driver's capture as this thread's metrics recorder (a registration
    /// makes its key's handles then).
    fn recorded<T>(&self, f: impl FnOnce() -> T) -> T {
        #[cfg(feature = "metrics")]
        return metrics::with_local_recorder(&self.exported, f);
        #[cfg(not(feature = "metrics"))]
        f()
    }

    /// Lets every closure end (the end of a run).
    fn finish_all(&mut self) {
        for t in 0..TASKS {
            self.let_go(t);
        }
    }
}

/// Runs one op sequence; panics on the first divergence between the registry and the model.
pub fn run(data: &[u8]) {
    crate::injected::pass_injected_panics();
    let mut bytes = Bytes::new(data);
    let cfg = Cfg::decode(&mut bytes);
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .max_blocking_threads(TASKS + 2)
        .build()
    else {
        return;
    };
    let (clock, _mock) = slotpool::Clock::mock();
    #[cfg(feature = "metrics")]
    let exported = crate::capture::Capture::default();
    #[cfg(feature = "metrics")]
    let keyed = Arc::new(metrics::with_local_recorder(&exported, || cfg.build(clock)));
    #[cfg(not(feature = "metrics"))]
    let keyed = Arc::new(cfg.build(clock));
    let mut driver = Driver {
        runtime,
        keyed,
        ledger: Arc::new(Ledger::default()),
        holders: (0..HOLDERS).map(|_| None).collect(),
        tasks: (0..TASKS).map(|_| None).collect(),
        values: 0,
        #[cfg(feature = "metrics")]
        exported,
    };
    let mut model = Model::new(cfg);
    let mut ops: Vec<Op> = Vec::new();
    // `KEYED_MODEL_TRACE=1` prints every op, its outcome and the model after it.
    let trace = std::env::var_os("KEYED_MODEL_TRACE").is_some();
    check(&cfg, &ops, &driver, &model);

    while ops.len() < MAX_OPS && !bytes.is_empty() {
        let held: Vec<usize> = (0..HOLDERS)
            .filter(|&h| model.holders[h].is_some())
            .collect();
        let running: Vec<usize> = (0..TASKS)
            .filter(|&t| {
                model.tasks[t].is_some_and(|task| task.share != usize::MAX && !task.abandoned)
            })
            .collect();
        let op = decode(&mut bytes, &held, &running);
        ops.push(op);
        let want = model.apply(op);
        let got = driver.apply(op);
        if trace {
            eprintln!("{}: {op:?} -> {got:?}\n{}", ops.len() - 1, model.dump());
        }
        if got != want {
            driver.finish_all();
            panic!(
                "{}\n  registry: {got:?}\n  model:    {want:?}\n{}",
                trail(&cfg, &ops),
                model.dump()
            );
        }
        check(&cfg, &ops, &driver, &model);
    }
    driver.finish_all();
    for t in 0..TASKS {
        model.end_closure(t);
    }
    for h in 0..HOLDERS {
        drop(driver.holders[h].take());
        if let Some((share, _)) = model.holders[h].take() {
            model.free(share);
        }
    }
    check(&cfg, &ops, &driver, &model);
}

/// The metrics each caller key exported, against the model: `slotpool_keyed_refusals_total`
/// and `slotpool_keyed_panics_total` (its refusals and panics), the `slotpool_keyed_in_use`
/// gauge (its admissions held and closures running) and the samples of
/// `slotpool_keyed_wait_seconds` (one per wait that ended: its `waits`, every caller of the
/// driver having finished waiting before a check). The first key that differs, described.
#[cfg(feature = "metrics")]
fn exported_mismatch(driver: &Driver, model: &Model) -> Option<String> {
    let exported = &driver.exported;
    for (k, key) in model.keys.iter().enumerate() {
        let labels = format!("key={},share={}", key.key, model.shares[key.share].key);
        let got = (
            exported.counter(&format!("slotpool_keyed_refusals_total{{{labels}}}")),
            exported.counter(&format!("slotpool_keyed_panics_total{{{labels}}}")),
            exported.gauge(&format!("slotpool_keyed_in_use{{{labels}}}")),
            exported
                .samples(&format!(
                    "slotpool_keyed_wait_seconds{{key={},pool=default,share={}}}",
                    key.key, model.shares[key.share].key
                ))
                .len() as u64,
        );
        let want = (
            key.refusals,
            key.panics,
            model.key_in_use(k) as f64,
            key.waits,
        );
        if got != want {
            return Some(format!(
                "exported metrics of {} (refusals, panics, in_use, wait samples): registry \
                 {got:?}, model {want:?}",
                key.key
            ));
        }
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

/// One key's `KeyStats`: key, share, in use, capacity, waiting, refusals, panics, waits,
/// wait time (nanoseconds).
type StatsRow = (Key, Key, usize, usize, usize, u64, u64, u64, u64);

fn check(cfg: &Cfg, ops: &[Op], driver: &Driver, model: &Model) {
    let keyed = &driver.keyed;
    let fail = |what: String| -> ! {
        let driver_tasks: Vec<(Key, bool, bool)> = driver
            .tasks
            .iter()
            .flatten()
            .map(|r| (r.key, r.abandoned, r.let_go))
            .collect();
        panic!(
            "{}\n  {what}\n  driver tasks {driver_tasks:?}\n{}",
            trail(cfg, ops),
            model.dump()
        )
    };
    let stats = keyed.stats();
    let want: Vec<StatsRow> = model
        .keys
        .iter()
        .map(|k| {
            let share = &model.shares[k.share];
            (
                k.key,
                share.key,
                share.in_use,
                share.capacity,
                0,
                k.refusals,
                k.panics,
                k.waits,
                0,
            )
        })
        .collect();
    let got: Vec<StatsRow> = stats
        .iter()
        .map(|s| {
            (
                s.key,
                s.share,
                s.in_use,
                s.capacity,
                s.waiting,
                s.refusals,
                s.panics,
                s.waits,
                s.wait_time.as_nanos() as u64,
            )
        })
        .collect();
    if got != want {
        fail(format!(
            "stats() (key, share, in_use, capacity, waiting, refusals, panics, waits, \
             wait_time):\n  registry {got:?}\n  model    {want:?}"
        ));
    }
    #[cfg(feature = "metrics")]
    if let Some(what) = exported_mismatch(driver, model) {
        fail(what);
    }
    let shares: Vec<(Key, usize)> = model.shares.iter().map(|s| (s.key, s.capacity)).collect();
    if keyed.shares() != shares {
        fail(format!(
            "shares(): registry {:?}, model {shares:?}",
            keyed.shares()
        ));
    }
    if keyed.total_shares() != model.total() {
        fail(format!(
            "total_shares(): registry {}, model {}",
            keyed.total_shares(),
            model.total()
        ));
    }
    for key in KEYS {
        let want = model
            .find(key)
            .map(|k| model.shares[model.keys[k].share].key);
        if keyed.share_of(&key) != want {
            fail(format!(
                "share_of({key:?}): registry {:?}, model {want:?}",
                keyed.share_of(&key)
            ));
        }
        let found = keyed.stats_for(&key);
        let expected = want.map(|_| {
            stats
                .iter()
                .find(|s| s.key == key)
                .cloned()
                .expect("a registered key is in stats()")
        });
        if found != expected {
            fail(format!(
                "stats_for({key:?}): {found:?}, stats() says {expected:?}"
            ));
        }
    }
    let ledger = &driver.ledger;
    let books = [
        (
            "closures started",
            ledger.started.load(Ordering::SeqCst),
            model.books.started,
        ),
        (
            "closures ended",
            ledger.ended.load(Ordering::SeqCst),
            model.books.ended,
        ),
        (
            "closures panicked",
            ledger.panicked.load(Ordering::SeqCst),
            model.books.panicked,
        ),
    ];
    for (name, got, want) in books {
        if got != want {
            fail(format!("{name}: registry {got}, model {want}"));
        }
    }
    for h in 0..HOLDERS {
        let got = driver.holders[h]
            .as_ref()
            .map(|a| (a.capacity(), a.in_use()));
        let want =
            model.holders[h].map(|(s, _)| (model.shares[s].capacity, model.shares[s].in_use));
        if got != want {
            fail(format!(
                "admission {h} (capacity, in_use): registry {got:?}, model {want:?}"
            ));
        }
    }
}
