//! A scripted `Manager` for the managed pool's tests: connections that count their drops (so a
//! test can check each was dropped exactly once), and create/recycle steps that succeed, fail,
//! reject, panic or hang until released, in the order a test scripts them (or at random, for
//! the storm).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slotpool::managed::{Manager, Meta, Pool, PoolBuilder, RecycleError, RecycleResult};
use tokio::sync::Semaphore;

use super::{MockTime, ReapByHand};

/// What one scripted `create` or `recycle` call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Succeed at once.
    Ok,
    /// Return the manager's error (`recycle`: a backend error).
    Fail,
    /// `recycle` only: reject with a message.
    Reject,
    /// Panic (on the first poll).
    Panic,
    /// Wait until the test releases one permit of the step's gate, then succeed.
    Hang,
}

#[derive(Debug, thiserror::Error)]
#[error("injected failure")]
pub struct Injected;

/// What the manager saw and did.
#[derive(Default)]
pub struct Ledger {
    next_id: AtomicU64,
    pub creates: AtomicU64,
    pub recycles: AtomicU64,
    pub detaches: AtomicU64,
    /// Drops per connection id (a second drop of one id is a bug the tests look for).
    drops: Mutex<HashMap<u64, u32>>,
    /// Ids whose connection panics when dropped.
    panic_on_drop: Mutex<Vec<u64>>,
    /// Ids whose connection's `detach` panics.
    panic_on_detach: Mutex<Vec<u64>>,
}

impl Ledger {
    /// Connections created so far.
    pub fn made(&self) -> u64 {
        self.next_id.load(Ordering::SeqCst)
    }

    /// Connections dropped so far (each counted once; see [`Ledger::assert_no_double_drop`]).
    pub fn dropped(&self) -> u64 {
        self.drops.lock().len() as u64
    }

    /// Connections alive: made and not dropped.
    pub fn alive(&self) -> u64 {
        self.made() - self.dropped()
    }

    pub fn was_dropped(&self, id: u64) -> bool {
        self.drops.lock().contains_key(&id)
    }

    pub fn assert_no_double_drop(&self) {
        let drops = self.drops.lock();
        let twice: Vec<_> = drops.iter().filter(|(_, &n)| n > 1).collect();
        assert!(twice.is_empty(), "connections dropped twice: {twice:?}");
    }

    /// Makes connection `id` panic when it is dropped.
    pub fn panic_on_drop(&self, id: u64) {
        self.panic_on_drop.lock().push(id);
    }

    /// Makes the manager's `detach` of connection `id` panic.
    pub fn panic_on_detach(&self, id: u64) {
        self.panic_on_detach.lock().push(id);
    }
}

/// A pooled connection.
pub struct Conn {
    pub id: u64,
    pub uses: u64,
    ledger: Arc<Ledger>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        *self.ledger.drops.lock().entry(self.id).or_default() += 1;
        if self.ledger.panic_on_drop.lock().contains(&self.id) {
            panic!("connection {} panics when dropped", self.id);
        }
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("id", &self.id).finish()
    }
}

/// The scripted manager. Unscripted calls succeed at once (or, with [`Script::random`], act at
/// random).
pub struct Scripted {
    pub ledger: Arc<Ledger>,
    pub script: Arc<Script>,
}

pub struct Script {
    creates: Mutex<VecDeque<Act>>,
    recycles: Mutex<VecDeque<Act>>,
    /// `has_broken` as objects come back: `Reject` (broken), `Panic`, else not broken.
    /// Never random.
    returns: Mutex<VecDeque<Act>>,
    /// Released by the test, one permit per hanging call.
    pub create_gate: Semaphore,
    pub recycle_gate: Semaphore,
    /// For the storm: act at random, seeded.
    random: Mutex<Option<SmallRng>>,
}

impl Script {
    pub fn creates(&self, acts: &[Act]) {
        self.creates.lock().extend(acts);
    }

    pub fn recycles(&self, acts: &[Act]) {
        self.recycles.lock().extend(acts);
    }

    /// What `has_broken` says of the next objects to come back: `Reject` broken, `Panic`
    /// panics, anything else not broken.
    pub fn returns(&self, acts: &[Act]) {
        self.returns.lock().extend(acts);
    }

    /// Acts at random from now on: mostly `Ok`, sometimes `Fail`, `Reject`, `Panic`, or a
    /// short wait (a few yields).
    pub fn random(&self, seed: u64) {
        *self.random.lock() = Some(SmallRng::seed_from_u64(seed));
    }

    fn next(&self, queue: &Mutex<VecDeque<Act>>) -> (Act, u32) {
        if let Some(act) = queue.lock().pop_front() {
            return (act, 0);
        }
        let mut random = self.random.lock();
        let Some(rng) = random.as_mut() else {
            return (Act::Ok, 0);
        };
        let act = match rng.random_range(0..100) {
            0..=79 => Act::Ok,
            80..=86 => Act::Fail,
            87..=92 => Act::Reject,
            _ => Act::Panic,
        };
        (act, rng.random_range(0..4))
    }
}

impl Scripted {
    pub fn new() -> Self {
        Scripted {
            ledger: Arc::new(Ledger::default()),
            script: Arc::new(Script {
                creates: Mutex::new(VecDeque::new()),
                recycles: Mutex::new(VecDeque::new()),
                returns: Mutex::new(VecDeque::new()),
                create_gate: Semaphore::new(0),
                recycle_gate: Semaphore::new(0),
                random: Mutex::new(None),
            }),
        }
    }
}

async fn yields(n: u32) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

impl Manager for Scripted {
    type Type = Conn;
    type Error = Injected;

    async fn create(&self) -> Result<Conn, Injected> {
        let (act, wait) = self.script.next(&self.script.creates);
        yields(wait).await;
        match act {
            Act::Ok | Act::Reject => {}
            Act::Fail => return Err(Injected),
            Act::Panic => panic!("create panics"),
            Act::Hang => self
                .script
                .create_gate
                .acquire()
                .await
                .expect("the gate stays open")
                .forget(),
        }
        self.ledger.creates.fetch_add(1, Ordering::SeqCst);
        Ok(Conn {
            id: self.ledger.next_id.fetch_add(1, Ordering::SeqCst),
            uses: 0,
            ledger: Arc::clone(&self.ledger),
        })
    }

    async fn recycle(&self, conn: &mut Conn, _: &Meta) -> RecycleResult<Injected> {
        let (act, wait) = self.script.next(&self.script.recycles);
        yields(wait).await;
        self.ledger.recycles.fetch_add(1, Ordering::SeqCst);
        match act {
            Act::Ok => {
                conn.uses += 1;
                Ok(())
            }
            Act::Fail => Err(RecycleError::Backend(Injected)),
            Act::Reject => Err(RecycleError::message("scripted rejection")),
            Act::Panic => panic!("recycle panics"),
            Act::Hang => {
                self.script
                    .recycle_gate
                    .acquire()
                    .await
                    .expect("the gate stays open")
                    .forget();
                Ok(())
            }
        }
    }

    fn has_broken(&self, _: &mut Conn) -> bool {
        let act = self.script.returns.lock().pop_front();
        match act {
            Some(Act::Reject) => true,
            Some(Act::Panic) => panic!("has_broken panics"),
            _ => false,
        }
    }

    fn detach(&self, conn: &mut Conn) {
        self.ledger.detaches.fetch_add(1, Ordering::SeqCst);
        if self.ledger.panic_on_detach.lock().contains(&conn.id) {
            panic!("detach of connection {} panics", conn.id);
        }
    }
}

/// The idle timeout of the fixture pools.
pub const IDLE: Duration = Duration::from_secs(60);

impl ReapByHand for PoolBuilder<Scripted> {
    fn reaped_by_hand(self, time: &MockTime) -> Self {
        self.reap_interval(None).clock(time.clock())
    }
}

/// A pool of `max_size` scripted connections on a mock clock, reaped by hand, with what its
/// manager records and scripts.
pub struct Fixture {
    pub time: MockTime,
    pub pool: Pool<Scripted>,
    pub ledger: Arc<Ledger>,
    pub script: Arc<Script>,
}

impl Fixture {
    pub fn new(max_size: usize) -> Self {
        Self::with(max_size, |builder| builder)
    }

    /// A fixture whose builder `configure` adjusts first.
    pub fn with(
        max_size: usize,
        configure: impl FnOnce(PoolBuilder<Scripted>) -> PoolBuilder<Scripted>,
    ) -> Self {
        let time = MockTime::new();
        let manager = Scripted::new();
        let (ledger, script) = (Arc::clone(&manager.ledger), Arc::clone(&manager.script));
        let builder = Pool::builder(manager)
            .max_size(max_size)
            .idle_timeout(IDLE)
            .reaped_by_hand(&time);
        let pool = configure(builder).build().expect("valid configuration");
        Fixture {
            time,
            pool,
            ledger,
            script,
        }
    }

    /// Asserts the books balance when nothing is being created: every connection made is
    /// alive in the pool (idle or in use) or was dropped exactly once, and the pool's counters
    /// agree with the manager's. (Connections taken with `Object::take` must have been dropped,
    /// and no `post_create` hook may have rejected one: those are made but never counted.)
    pub fn assert_balanced(&self) {
        self.ledger.assert_no_double_drop();
        let stats = self.pool.stats();
        let gone = stats.discarded
            + stats.broken
            + stats.expired
            + stats.reaped
            + stats.surplus
            + stats.retained_out
            + stats.detached;
        assert_eq!(
            stats.created,
            stats.status.size as u64 + gone,
            "created = alive + gone: {stats:?}"
        );
        assert_eq!(
            self.ledger.made(),
            stats.created,
            "the manager made what the pool counts: {stats:?}"
        );
        assert_eq!(
            self.ledger.alive(),
            stats.status.size as u64,
            "the connections alive are the pool's: {stats:?}"
        );
        assert_eq!(
            stats.status.size,
            stats.status.available + stats.status.in_use,
            "{stats:?}"
        );
    }
}
