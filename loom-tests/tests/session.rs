#![cfg(slotpool_loom)]
//! Loom models of the session pool's protocol (`slotpool::flight`).
//!
//! `slotpool::session` needs tokio and is compiled out under `cfg(slotpool_loom)`; its
//! executor-agnostic core, `slotpool::flight` (the registry, flights and use stamps), is not.
//! These models drive that core with the same calls, in the same order, as `session.rs`:
//!
//! * `acquire`: hash the key once (`Registry::hashed`), `get` under the shard's read lock; a
//!   `Ready` value is checked with `UseStamp::touch` (a retired
//!   one is removed and the acquire goes round again); otherwise `claim`; the leader takes a
//!   permit with `Limit::try_acquire_owned` (none left: abandon + complete with "exhausted"),
//!   "establishes" (counted), then `install` + `complete`, or, if `install` hands the value
//!   back, retires it and completes with "released"; followers `block_on` the flight's wait;
//! * `release`: hash once, `get`; a `Ready` value is retired (stamp moved to `RETIRED`, permit dropped)
//!   and then removed by identity; a `Flying` entry is removed by identity;
//! * `reap`: `retire_if_idle`, then remove by identity;
//! * `stop`: `Registry::close`, then retire what it drained.
//!
//! * starting event readers: `Batch::push` per installed session; the push that returns `true`
//!   schedules a starter (here a thread) that calls `Batch::take`; a starter dropped unrun
//!   calls `Batch::unschedule`.
//!
//! Each model checks the accounting the issue asks for: one establishment per flight, every
//! joiner woken with the flight's result, every value freed exactly once, and every permit
//! back once the dust settles.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p
//! slotpool-loom-tests --test session --target-dir target/loom`.

use loom::future::block_on;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use slotpool::flight::{Batch, Claim, Entry, Flight, Hashed, Registry, Touch, UseStamp};
use slotpool::{Limit, OwnedPermit, TryAcquireError};

/// Idle bound used by every model (nanoseconds).
const MAX_IDLE: u64 = 10;

/// Stands in for `Live`: an id, a use stamp, the permit it owns until retired.
struct Res {
    id: usize,
    stamp: UseStamp,
    permit: Mutex<Option<OwnedPermit>>,
    frees: AtomicUsize,
}

impl Res {
    /// `Live::retire`: whoever wins the stamp frees (here: drops the permit, counts).
    fn retire(&self) -> bool {
        let won = self.stamp.retire();
        if won {
            self.free();
        }
        won
    }

    fn retire_if_idle(&self, now: u64) -> bool {
        let won = self.stamp.retire_if_idle(now, MAX_IDLE);
        if won {
            self.free();
        }
        won
    }

    fn free(&self) {
        let permit = self.permit.lock().unwrap().take();
        assert!(permit.is_some(), "freed twice");
        drop(permit);
        self.frees.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Failure {
    Exhausted,
    Established,
    Released,
    Closed,
}

type Outcome = Result<Arc<Res>, Failure>;

/// The session pool's shape around the registry.
struct Pool {
    registry: Registry<u8, Arc<Res>, Outcome>,
    limit: Arc<Limit>,
    /// Establishments started (connects).
    establishments: AtomicUsize,
    /// Establishments that fail, counting down (0: none fails).
    fail_next: AtomicUsize,
    /// Every value ever created, to check each is freed exactly once.
    created: Mutex<Vec<Arc<Res>>>,
}

impl Pool {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Pool {
            registry: Registry::new(1),
            limit: Arc::new(Limit::new(capacity).unwrap()),
            establishments: AtomicUsize::new(0),
            fail_next: AtomicUsize::new(0),
            created: Mutex::new(Vec::new()),
        })
    }

    /// `SessionPool::acquire` at time `now`.
    fn acquire(&self, key: u8, now: u64) -> Outcome {
        let key = self.registry.hashed(&key);
        loop {
            let flight = match self.registry.get(key) {
                Some(Entry::Ready(res)) => match self.check(key, res, now) {
                    Some(res) => return Ok(res),
                    None => continue,
                },
                Some(Entry::Flying(flight)) => flight,
                None => match self.registry.claim(key, || *key.key()) {
                    Claim::Ready(res) => match self.check(key, res, now) {
                        Some(res) => return Ok(res),
                        None => continue,
                    },
                    Claim::Join(flight) => flight,
                    Claim::Lead(flight) => {
                        self.lead(key, now, &flight);
                        flight
                    }
                    Claim::Closed => return Err(Failure::Closed),
                },
            };
            return block_on(Flight::wait(flight));
        }
    }

    /// `Shared::check`, for a value that is alive by construction.
    fn check(&self, key: Hashed<'_, u8>, res: Arc<Res>, now: u64) -> Option<Arc<Res>> {
        match res.stamp.touch(now, MAX_IDLE) {
            Touch::Fresh => return Some(res),
            Touch::Stale => {
                res.retire_if_idle(now);
            }
            Touch::Retired => {}
        }
        if res.stamp.is_retired() {
            self.registry.remove_if(
                key,
                |e| matches!(e, Entry::Ready(r) if Arc::ptr_eq(r, &res)),
            );
        }
        None
    }

    /// `SessionPool::lead` + the establishment task, run inline (the task's placement does
    /// not change the registry protocol).
    fn lead(&self, key: Hashed<'_, u8>, now: u64, flight: &Arc<Flight<Outcome>>) {
        let permit = match Limit::try_acquire_owned(&self.limit) {
            Ok(permit) => permit,
            Err(error) => {
                self.registry.abandon(key, flight);
                flight.complete(Err(match error {
                    TryAcquireError::NoCapacity => Failure::Exhausted,
                    // A bare `Limit` has no breaker; `Unavailable` cannot come from it.
                    TryAcquireError::Closed | TryAcquireError::Unavailable { .. } => {
                        Failure::Closed
                    }
                }));
                return;
            }
        };
        let id = self.establishments.fetch_add(1, Ordering::SeqCst);
        let fails = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fails {
            drop(permit);
            self.registry.abandon(key, flight);
            flight.complete(Err(Failure::Established));
            return;
        }
        let res = Arc::new(Res {
            id,
            stamp: UseStamp::new(now),
            permit: Mutex::new(Some(permit)),
            frees: AtomicUsize::new(0),
        });
        self.created.lock().unwrap().push(Arc::clone(&res));
        let outcome = match self.registry.install(key, flight, Arc::clone(&res)) {
            Ok(()) => Ok(res),
            Err(res) => {
                res.retire();
                Err(if self.registry.is_closed() {
                    Failure::Closed
                } else {
                    Failure::Released
                })
            }
        };
        flight.complete(outcome);
    }

    /// `SessionPool::release`.
    fn release(&self, key: u8) -> bool {
        let key = self.registry.hashed(&key);
        match self.registry.get(key) {
            None => false,
            Some(Entry::Ready(res)) => {
                res.retire();
                self.registry.remove_if(
                    key,
                    |e| matches!(e, Entry::Ready(r) if Arc::ptr_eq(r, &res)),
                );
                true
            }
            Some(Entry::Flying(flight)) => {
                self.registry.remove_if(
                    key,
                    |e| matches!(e, Entry::Flying(f) if Arc::ptr_eq(f, &flight)),
                );
                true
            }
        }
    }

    /// `Shared::reap`.
    fn reap(&self, now: u64) -> usize {
        let mut reaped = 0;
        for (key, res) in self.registry.ready() {
            let won = res.retire_if_idle(now);
            if won || res.stamp.is_retired() {
                self.registry.remove_if(
                    self.registry.hashed(&key),
                    |e| matches!(e, Entry::Ready(r) if Arc::ptr_eq(r, &res)),
                );
            }
            reaped += usize::from(won);
        }
        reaped
    }

    /// `SessionPool::stop`.
    fn stop(&self) {
        self.limit.close();
        for entry in self.registry.close() {
            if let Entry::Ready(res) = entry {
                res.retire();
            }
        }
    }

    /// After every thread is done: release what is left, then every value must have been
    /// freed exactly once and every permit returned.
    fn assert_settled(&self) {
        self.release(0);
        assert!(self.registry.is_empty(), "no entry left behind");
        for res in self.created.lock().unwrap().iter() {
            assert_eq!(
                res.frees.load(Ordering::SeqCst),
                1,
                "value {} freed exactly once",
                res.id
            );
        }
        assert_eq!(
            self.limit.available(),
            self.limit.capacity(),
            "every permit returned"
        );
    }
}

/// Two concurrent acquires of one new session: one establishment, both get the same value
/// (the joiner is woken: loom reports a deadlock otherwise).
#[test]
fn single_flight_shares_one_establishment() {
    loom::model(|| {
        let pool = Pool::new(2);
        let other = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire(0, 1))
        };
        let mine = pool.acquire(0, 1).unwrap();
        let theirs = other.join().unwrap().unwrap();
        assert!(
            Arc::ptr_eq(&mine, &theirs),
            "both callers share one connection"
        );
        assert_eq!(pool.establishments.load(Ordering::SeqCst), 1);
        assert_eq!(pool.limit.in_use(), 1);
        pool.assert_settled();
    });
}

/// Three callers (two threads and the main one): still one establishment, one value.
#[test]
fn single_flight_three_callers() {
    loom::model(|| {
        let pool = Pool::new(1);
        let others: Vec<_> = (0..2)
            .map(|_| {
                let pool = Arc::clone(&pool);
                thread::spawn(move || pool.acquire(0, 1))
            })
            .collect();
        let mine = pool.acquire(0, 1).unwrap();
        for other in others {
            assert!(Arc::ptr_eq(&mine, &other.join().unwrap().unwrap()));
        }
        assert_eq!(pool.establishments.load(Ordering::SeqCst), 1);
        pool.assert_settled();
    });
}

/// A failed establishment reaches every caller that joined it; a caller that arrives after
/// the flight ended starts a new one. No flight is left in the map, no permit is kept.
#[test]
fn single_flight_failure_reaches_joiners() {
    loom::model(|| {
        let pool = Pool::new(1);
        pool.fail_next.store(1, Ordering::SeqCst);
        let other = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire(0, 1))
        };
        let mine = pool.acquire(0, 1);
        let theirs = other.join().unwrap();
        let establishments = pool.establishments.load(Ordering::SeqCst);
        let failed = [&mine, &theirs]
            .iter()
            .filter(|r| matches!(r, Err(Failure::Established)))
            .count();
        match establishments {
            // Both joined the one failed flight.
            1 => assert_eq!(failed, 2),
            // One met the failure, the other came after it and succeeded.
            2 => assert_eq!(failed, 1),
            n => panic!("{n} establishments for two callers"),
        }
        assert!(
            !matches!(
                pool.registry.get(pool.registry.hashed(&0)),
                Some(Entry::Flying(_))
            ),
            "no flight left"
        );
        pool.assert_settled();
    });
}

/// Release racing a hot acquire of an active session (pool size 1). The acquire either got
/// the old value before it was retired, or rebuilt, or (tight race at full capacity) saw
/// `Exhausted`; in every case the old value is freed once and capacity comes back.
#[test]
fn release_racing_acquire() {
    loom::model(|| {
        let pool = Pool::new(1);
        let old = pool.acquire(0, 1).unwrap();
        let acquirer = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire(0, 2))
        };
        assert!(pool.release(0));
        match acquirer.join().unwrap() {
            Ok(_) => {}
            Err(Failure::Exhausted) | Err(Failure::Released) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
        assert!(old.stamp.is_retired());
        assert_eq!(
            old.frees.load(Ordering::SeqCst),
            1,
            "the released value is freed once"
        );
        pool.assert_settled();
    });
}

/// Release of a session while its establishment is in flight: the leader's install is
/// refused, it frees the value itself, and the flight fails with `Released`.
#[test]
fn release_racing_establishment() {
    loom::model(|| {
        let pool = Pool::new(1);
        let acquirer = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire(0, 1))
        };
        pool.release(0);
        match acquirer.join().unwrap() {
            Ok(_) | Err(Failure::Released) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
        pool.assert_settled();
    });
}

/// The reaper racing a hot acquire of a session idle for exactly the bound at the acquire's
/// time but past it at the reaper's: exactly one wins (refresh or retire), never both.
/// (Capacity 2, so a rebuild never meets the old permit not yet dropped.)
#[test]
fn reap_racing_touch() {
    loom::model(|| {
        let pool = Pool::new(2);
        let old = pool.acquire(0, 0).unwrap();
        let reaper = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.reap(MAX_IDLE + 5))
        };
        let got = pool.acquire(0, MAX_IDLE).unwrap();
        let reaped = reaper.join().unwrap();
        if Arc::ptr_eq(&got, &old) {
            // The acquire refreshed the stamp first (to MAX_IDLE), so the reaper's CAS saw
            // it fresh: it cannot retire a value an acquire just refreshed.
            assert_eq!(reaped, 0);
            assert!(!old.stamp.is_retired());
        } else {
            // The reaper retired the old value first; the acquire rebuilt.
            assert_eq!(reaped, 1);
            assert!(old.stamp.is_retired());
        }
        pool.assert_settled();
    });
}

/// Stop racing an establishment: whatever the order, the new value is freed exactly once
/// and the caller sees it or `Closed`.
#[test]
fn stop_racing_establishment() {
    loom::model(|| {
        let pool = Pool::new(1);
        let acquirer = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire(0, 1))
        };
        pool.stop();
        match acquirer.join().unwrap() {
            Ok(res) => assert!(res.stamp.is_retired(), "stop retired it"),
            Err(Failure::Closed) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
        assert!(matches!(pool.acquire(0, 2), Err(Failure::Closed)));
        for res in pool.created.lock().unwrap().iter() {
            assert_eq!(res.frees.load(Ordering::SeqCst), 1);
        }
        assert_eq!(pool.limit.available(), 1);
    });
}

/// Queues `item`; if the push says so, schedules a drain (a thread here, a starter task in the
/// pool) that records what it takes.
fn push_and_maybe_drain(
    batch: &Arc<Batch<u8>>,
    taken: &Arc<Mutex<Vec<u8>>>,
    item: u8,
) -> Option<thread::JoinHandle<()>> {
    if !batch.push(item) {
        return None;
    }
    let (batch, taken) = (Arc::clone(batch), Arc::clone(taken));
    Some(thread::spawn(move || {
        let items = batch.take();
        taken.lock().unwrap().extend(items);
    }))
}

/// Two sessions installed at once while a starter may be draining: every queued item is taken
/// by exactly one drain that a push scheduled, and none is left queued with no drain to come.
#[test]
fn batch_never_strands_an_item() {
    loom::model(|| {
        let batch = Arc::new(Batch::new());
        let taken = Arc::new(Mutex::new(Vec::new()));
        let producer = {
            let (batch, taken) = (Arc::clone(&batch), Arc::clone(&taken));
            thread::spawn(move || push_and_maybe_drain(&batch, &taken, 0))
        };
        let mine = push_and_maybe_drain(&batch, &taken, 1);
        let theirs = producer.join().unwrap();
        for drain in [mine, theirs].into_iter().flatten() {
            drain.join().unwrap();
        }
        let mut got = taken.lock().unwrap().clone();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1], "every item taken exactly once");
        assert!(batch.is_empty(), "nothing stranded");
    });
}

/// A scheduled starter that never runs (its runtime shut down) gives up its turn: the items it
/// would have taken stay queued, and the next push schedules a drain that takes them all.
#[test]
fn batch_unscheduled_drain_hands_over() {
    loom::model(|| {
        let batch = Arc::new(Batch::new());
        let taken = Arc::new(Mutex::new(Vec::new()));
        let dropped = {
            let batch = Arc::clone(&batch);
            thread::spawn(move || {
                if batch.push(0) {
                    // The drain this push scheduled is dropped unrun.
                    batch.unschedule();
                    true
                } else {
                    false
                }
            })
        };
        let mine = push_and_maybe_drain(&batch, &taken, 1);
        let mine_claimed = mine.is_some();
        let scheduled_and_dropped = dropped.join().unwrap();
        if let Some(drain) = mine {
            drain.join().unwrap();
        }
        let before = format!("{batch:?}");
        // Whatever is left must be picked up by the next push's drain.
        let next = push_and_maybe_drain(&batch, &taken, 2);
        let next_claimed = next.is_some();
        if let Some(drain) = next {
            drain.join().unwrap();
        }
        let mut got = taken.lock().unwrap().clone();
        got.sort_unstable();
        if batch.is_empty() {
            assert_eq!(got, vec![0, 1, 2], "every item taken once");
        } else {
            // Only possible while a drain is still scheduled: none is, so fail.
            panic!(
                "stranded {batch:?} (dropped drain: {scheduled_and_dropped}, mine scheduled: \
                 {mine_claimed}, before the last push: {before}, it scheduled: {next_claimed})"
            );
        }
    });
}
