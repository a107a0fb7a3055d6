//! Differential driver for `slotpool::session::SessionPool`: decodes a sequence of operations
//! (acquire, release, reset, kill a connection, fail or panic in the next connect / bootstrap /
//! reattach, advance the mock clock, reap), runs each on a real pool single-threaded (a current-thread
//! tokio runtime), runs it on a plain sequential model, and panics on the first difference in
//! an outcome, in `stats()`, or in the connector's open/close counts.
//!
//! Shared by the `session_ops` fuzz target and by `cargo test` (`core/tests/
//! session_fuzz_replay.rs` includes this file with `#[path]`; it refers to the byte reader as
//! `crate::bytes`, which both crates provide at their root).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use slotpool::__internal::flight::TOUCH_SLACK;
use slotpool::session::{
    Connector, LoopId, Origin, Session, SessionContext, SessionError, SessionPool, Stage,
};

use crate::bytes::Bytes;

/// Session ids the ops choose from.
const SESSIONS: usize = 4;
/// The pool's `pool_size` (below `SESSIONS`, so `Exhausted` is reachable).
const POOL_SIZE: usize = 3;
/// The pool's `max_idle_time`.
const MAX_IDLE: Duration = Duration::from_secs(10);
/// One clock step of an `Advance` op (so 100 steps land exactly on `MAX_IDLE`).
const STEP: Duration = Duration::from_millis(100);
/// Longest op sequence decoded from one input.
const MAX_OPS: usize = 512;

#[derive(Debug)]
struct FuzzError(&'static str);

impl std::fmt::Display for FuzzError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for FuzzError {}

#[derive(Debug)]
struct FuzzConn {
    id: u64,
    alive: AtomicBool,
    closed: AtomicBool,
}

#[derive(Debug, Default)]
struct Knobs {
    opened: AtomicU64,
    closed: AtomicU64,
    next_loop: AtomicU64,
    fail_connect: AtomicBool,
    fail_bootstrap: AtomicBool,
    fail_reattach: AtomicBool,
    panic_connect: AtomicBool,
    panic_bootstrap: AtomicBool,
}

/// Marks the panics this driver injects into its connector (which the pool must contain).
const INJECTED: &str = "injected by session_ops";

#[derive(Debug, Clone, Default)]
struct FuzzConnector(Arc<Knobs>);

impl Connector for FuzzConnector {
    type Conn = FuzzConn;
    type Event = ();
    type Error = FuzzError;

    fn connect(&self) -> impl Future<Output = Result<FuzzConn, FuzzError>> + Send {
        let knobs = &self.0;
        if knobs.panic_connect.swap(false, Ordering::SeqCst) {
            panic!("{}", INJECTED);
        }
        let result = if knobs.fail_connect.swap(false, Ordering::SeqCst) {
            Err(FuzzError("connect"))
        } else {
            Ok(FuzzConn {
                id: knobs.opened.fetch_add(1, Ordering::SeqCst),
                alive: AtomicBool::new(true),
                closed: AtomicBool::new(false),
            })
        };
        std::future::ready(result)
    }

    fn bootstrap(
        &self,
        _conn: &FuzzConn,
        _session: &str,
        _ctx: &SessionContext,
    ) -> impl Future<Output = Result<LoopId, FuzzError>> + Send {
        let knobs = Arc::clone(&self.0);
        if knobs.panic_bootstrap.swap(false, Ordering::SeqCst) {
            // Panics when polled, not when called: the pool guards both.
            return futures_ready_or_panic(None);
        }
        let result = if knobs.fail_bootstrap.swap(false, Ordering::SeqCst) {
            Err(FuzzError("bootstrap"))
        } else {
            Ok(LoopId::new(format!(
                "loop-{}",
                knobs.next_loop.fetch_add(1, Ordering::SeqCst)
            )))
        };
        futures_ready_or_panic(Some(result))
    }

    fn reattach(
        &self,
        _conn: &FuzzConn,
        _loop_id: &LoopId,
    ) -> impl Future<Output = Result<(), FuzzError>> + Send {
        let result = if self.0.fail_reattach.swap(false, Ordering::SeqCst) {
            Err(FuzzError("reattach"))
        } else {
            Ok(())
        };
        std::future::ready(result)
    }

    fn is_alive(&self, conn: &FuzzConn) -> bool {
        conn.alive.load(Ordering::SeqCst)
    }

    fn next_event(&self, _conn: &FuzzConn) -> impl Future<Output = Option<()>> + Send {
        std::future::pending()
    }

    fn close(&self, conn: &FuzzConn) {
        assert!(
            !conn.closed.swap(true, Ordering::SeqCst),
            "connection {} closed twice",
            conn.id
        );
        self.0.closed.fetch_add(1, Ordering::SeqCst);
    }
}

/// Returns `result`, or panics (when polled, not when called) if there is none.
async fn futures_ready_or_panic<T>(result: Option<T>) -> T {
    match result {
        Some(result) => result,
        None => panic!("{}", INJECTED),
    }
}

/// One decoded operation.
#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire(usize),
    Release(usize),
    Reset(usize),
    Kill(usize),
    FailConnect,
    FailBootstrap,
    FailReattach,
    PanicConnect,
    PanicBootstrap,
    Advance(u32),
    Reap,
}

fn decode(bytes: &mut Bytes<'_>) -> Op {
    let op = bytes.byte();
    // The top bytes inject panics; the rest keep the meaning they had before panics existed.
    match op {
        250..=252 => return Op::PanicConnect,
        253..=255 => return Op::PanicBootstrap,
        _ => {}
    }
    match op % 12 {
        0..=3 => Op::Acquire(bytes.below(SESSIONS)),
        4 => Op::Release(bytes.below(SESSIONS)),
        5 => Op::Reset(bytes.below(SESSIONS)),
        6 => Op::Kill(bytes.below(SESSIONS)),
        7 => Op::FailConnect,
        8 => Op::FailBootstrap,
        9 => Op::FailReattach,
        10 => Op::Advance(u32::from(bytes.byte())),
        _ => Op::Reap,
    }
}

/// What an acquire returned, in the model's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok {
        conn: u64,
        loop_id: String,
        origin: Origin,
    },
    Exhausted,
    Connect,
    Bootstrap,
    Reattach,
    Panicked(Stage),
    Other(String),
}

fn outcome(result: &Result<Session<FuzzConnector>, SessionError>) -> Outcome {
    match result {
        Ok(session) => Outcome::Ok {
            conn: session.connection().id,
            loop_id: session.loop_id().to_string(),
            origin: session.origin(),
        },
        Err(SessionError::Exhausted { .. }) => Outcome::Exhausted,
        Err(SessionError::Connect { .. }) => Outcome::Connect,
        Err(SessionError::Bootstrap { .. }) => Outcome::Bootstrap,
        Err(SessionError::Reattach { .. }) => Outcome::Reattach,
        Err(SessionError::Panicked { stage, reach, .. }) => {
            assert_eq!(*reach, stage.reach(), "a panic's reach is its stage's");
            Outcome::Panicked(*stage)
        }
        Err(other) => Outcome::Other(format!("{other:?}")),
    }
}

#[derive(Debug, Clone)]
struct ModelSession {
    conn: u64,
    loop_id: String,
    origin: Origin,
    last_used: u64,
    dead: bool,
}

/// The sequential model: what the pool must do, written as plainly as possible.
#[derive(Debug, Default)]
struct Model {
    now: u64,
    active: [Option<ModelSession>; SESSIONS],
    stored: [Option<String>; SESSIONS],
    fail_connect: bool,
    fail_bootstrap: bool,
    fail_reattach: bool,
    panic_connect: bool,
    panic_bootstrap: bool,
    opened: u64,
    closed: u64,
    next_loop: u64,
    connects: u64,
    bootstraps: u64,
    reattaches: u64,
    failures: u64,
    exhausted: u64,
    released: u64,
    reaped: u64,
    rebuilt: u64,
    panics: u64,
}

impl Model {
    fn max_idle() -> u64 {
        MAX_IDLE.as_nanos() as u64
    }

    fn idle(&self, session: &ModelSession) -> bool {
        self.now.saturating_sub(session.last_used) > Self::max_idle()
    }

    /// A new loop id, `Err(true)` if the bootstrap panics, `Err(false)` if it fails.
    fn bootstrap(&mut self) -> Result<String, bool> {
        if std::mem::take(&mut self.panic_bootstrap) {
            return Err(true);
        }
        if std::mem::take(&mut self.fail_bootstrap) {
            return Err(false);
        }
        let id = format!("loop-{}", self.next_loop);
        self.next_loop += 1;
        Ok(id)
    }

    /// A failed bootstrap (after the connect): the connection is closed, the failure counted.
    fn bootstrap_failed(&mut self, panicked: bool, failure: Outcome) -> Outcome {
        self.closed += 1;
        self.failures += 1;
        if panicked {
            self.panics += 1;
            return Outcome::Panicked(Stage::Bootstrap);
        }
        failure
    }

    fn acquire(&mut self, s: usize) -> Outcome {
        if let Some(current) = self.active[s].clone() {
            if !current.dead && !self.idle(&current) {
                if let Some(session) = self.active[s].as_mut() {
                    // A stamp within `max_idle / TOUCH_SLACK` of now is left as it is (the
                    // touch writes nothing), so the reaper may retire it that much early.
                    if self.now.saturating_sub(session.last_used) > Self::max_idle() / TOUCH_SLACK {
                        session.last_used = self.now;
                    }
                }
                return Outcome::Ok {
                    conn: current.conn,
                    loop_id: current.loop_id,
                    origin: current.origin,
                };
            }
            self.active[s] = None;
            self.closed += 1;
            self.rebuilt += 1;
        }
        if self.active.iter().flatten().count() >= POOL_SIZE {
            self.exhausted += 1;
            return Outcome::Exhausted;
        }
        self.connects += 1;
        if std::mem::take(&mut self.panic_connect) {
            self.failures += 1;
            self.panics += 1;
            return Outcome::Panicked(Stage::Connect);
        }
        if std::mem::take(&mut self.fail_connect) {
            self.failures += 1;
            return Outcome::Connect;
        }
        let conn = self.opened;
        self.opened += 1;
        let (loop_id, origin) = match self.stored[s].clone() {
            Some(stored) if !std::mem::take(&mut self.fail_reattach) => {
                (stored, Origin::Reattached)
            }
            Some(_) => match self.bootstrap() {
                Ok(fresh) => (fresh, Origin::BootstrappedAfterReattach),
                Err(panicked) => return self.bootstrap_failed(panicked, Outcome::Reattach),
            },
            None => match self.bootstrap() {
                Ok(fresh) => (fresh, Origin::Bootstrapped),
                Err(panicked) => return self.bootstrap_failed(panicked, Outcome::Bootstrap),
            },
        };
        if origin == Origin::Reattached {
            self.reattaches += 1;
        } else {
            self.bootstraps += 1;
            self.stored[s] = Some(loop_id.clone());
        }
        self.active[s] = Some(ModelSession {
            conn,
            loop_id: loop_id.clone(),
            origin,
            last_used: self.now,
            dead: false,
        });
        Outcome::Ok {
            conn,
            loop_id,
            origin,
        }
    }

    fn release(&mut self, s: usize) -> bool {
        if self.active[s].take().is_some() {
            self.closed += 1;
            self.released += 1;
            true
        } else {
            false
        }
    }

    fn reap(&mut self) -> usize {
        let mut reaped = 0;
        for s in 0..SESSIONS {
            let idle = self.active[s]
                .as_ref()
                .is_some_and(|session| self.idle(session));
            if idle {
                self.active[s] = None;
                self.closed += 1;
                reaped += 1;
            }
        }
        self.reaped += reaped as u64;
        reaped
    }

    fn active(&self) -> usize {
        self.active.iter().flatten().count()
    }
}

/// Runs one op sequence; panics on the first divergence between the pool and the model.
pub fn run(data: &[u8]) {
    crate::injected::pass_injected_panics();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let connector = FuzzConnector::default();
    let knobs = Arc::clone(&connector.0);
    let (clock, mock) = slotpool::Clock::mock();
    let pool = {
        let _enter = runtime.enter();
        match SessionPool::builder(connector)
            .pool_size(POOL_SIZE)
            .max_idle_time(MAX_IDLE)
            .clock(clock)
            .reap_every(None)
            .build()
        {
            Ok(pool) => pool,
            Err(error) => panic!("valid configuration refused: {error}"),
        }
    };
    let ctx = SessionContext::new("fuzz", "fuzzer");
    let names: Vec<String> = (0..SESSIONS).map(|s| format!("s{s}")).collect();
    let mut handles: Vec<Option<Session<FuzzConnector>>> = (0..SESSIONS).map(|_| None).collect();
    let mut model = Model::default();
    let mut bytes = Bytes::new(data);

    for step in 0..MAX_OPS {
        if bytes.is_empty() {
            break;
        }
        let op = decode(&mut bytes);
        match op {
            Op::Acquire(s) => {
                let result = runtime.block_on(pool.acquire(&names[s], &ctx));
                assert_eq!(outcome(&result), model.acquire(s), "step {step}: {op:?}");
                if let Ok(session) = result {
                    handles[s] = Some(session);
                }
            }
            Op::Release(s) | Op::Reset(s) => {
                let got = if matches!(op, Op::Release(_)) {
                    pool.release(&names[s])
                } else {
                    pool.reset_session(&names[s])
                };
                assert_eq!(got, model.release(s), "step {step}: {op:?}");
            }
            Op::Kill(s) => {
                if let (Some(m), Some(handle)) = (model.active[s].as_mut(), handles[s].as_ref()) {
                    assert_eq!(
                        handle.connection().id,
                        m.conn,
                        "step {step}: handle is the active one"
                    );
                    handle.connection().alive.store(false, Ordering::SeqCst);
                    m.dead = true;
                }
            }
            Op::FailConnect => {
                knobs.fail_connect.store(true, Ordering::SeqCst);
                model.fail_connect = true;
            }
            Op::FailBootstrap => {
                knobs.fail_bootstrap.store(true, Ordering::SeqCst);
                model.fail_bootstrap = true;
            }
            Op::FailReattach => {
                knobs.fail_reattach.store(true, Ordering::SeqCst);
                model.fail_reattach = true;
            }
            Op::PanicConnect => {
                knobs.panic_connect.store(true, Ordering::SeqCst);
                model.panic_connect = true;
            }
            Op::PanicBootstrap => {
                knobs.panic_bootstrap.store(true, Ordering::SeqCst);
                model.panic_bootstrap = true;
            }
            Op::Advance(steps) => {
                let by = STEP * steps;
                mock.advance(by);
                model.now += by.as_nanos() as u64;
            }
            Op::Reap => {
                let got = pool.reap(pool.clock().now());
                assert_eq!(got, model.reap(), "step {step}: {op:?}");
            }
        }
        check(step, &pool, &knobs, &model);
    }

    pool.close();
    drop(handles);
    assert_eq!(
        knobs.opened.load(Ordering::SeqCst),
        knobs.closed.load(Ordering::SeqCst),
        "after stop every connection is closed"
    );
    assert_eq!(pool.stats().in_use, 0);
}

fn check(step: usize, pool: &SessionPool<FuzzConnector>, knobs: &Knobs, model: &Model) {
    let stats = pool.stats();
    assert_eq!(
        (stats.active, stats.in_use, stats.establishing, stats.idle),
        (model.active(), model.active(), 0, 0),
        "step {step}: stats (active, in_use, establishing, idle)"
    );
    let want = (
        model.connects,
        model.bootstraps,
        model.reattaches,
        model.failures,
        model.exhausted,
        model.released,
        model.reaped,
        model.rebuilt,
        model.panics,
    );
    let got = (
        stats.connects,
        stats.bootstraps,
        stats.reattaches,
        stats.failures,
        stats.exhausted,
        stats.released,
        stats.reaped,
        stats.rebuilt,
        stats.panics,
    );
    assert_eq!(
        got, want,
        "step {step}: stats (connects, bootstraps, reattaches, failures, exhausted, released, \
         reaped, rebuilt, panics)"
    );
    assert_eq!(
        (
            knobs.opened.load(Ordering::SeqCst),
            knobs.closed.load(Ordering::SeqCst)
        ),
        (model.opened, model.closed),
        "step {step}: connections (opened, closed)"
    );
}
