#![cfg(slotpool_loom)]
//! Loom models of the session pool's protocol: [`slotpool::__internal::flight`]'s registry, flights, use
//! stamps, batches and the [`Directory`] that makes every decision of the pool.
//!
//! `slotpool::session` needs tokio and is compiled out under `cfg(slotpool_loom)`; what it
//! decides is not. An acquire, a release, the reaper and a stop call [`Directory`] for every
//! decision (what a lookup found and whether it must retire it, who leads, whether there is
//! capacity, what a leader may install, what is retired and removed), and these models call
//! the same methods. What is left here is what the pool does between them, which is no
//! decision: hash once, look up, claim if vacant, count a rebuild, establish (here: build a
//! value that owns the leader's permit, or fail on demand), complete the flight, and wait on a
//! flight with `block_on`. The value type stands in for the pool's `Live` through the same
//! [`Tenant`] trait: its `free` drops the permit and counts, so "freed exactly once" and
//! "every permit returned" are checked in every execution.
//!
//! * starting event readers: `Batch::push` per installed session; the push that returns `true`
//!   schedules a starter (here a thread) that calls `Batch::take`; a starter dropped unrun
//!   calls `Batch::unschedule`.
//!
//! Every model counts, outside loom's state, the executions it explored and the times the path
//! it is named for was taken, and fails if it explored only one execution or never took it.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --test session --target-dir target/loom`.

use loom::future::block_on;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use slotpool::__internal::flight::{
    Batch, Directory, Entry, Flight, Hashed, NotFresh, Outcome as FlightOutcome, Refusal, Step,
    Tenant, UseStamp,
};
use slotpool::__internal::limit::{Limit, OwnedPermit};
use slotpool_loom_tests::model;

/// Idle bound used by every model (nanoseconds).
const MAX_IDLE: u64 = 10;

/// Stands in for `Live`: an id, a use stamp, liveness, the permit it owns until retired.
struct Res {
    id: usize,
    stamp: UseStamp,
    alive: AtomicBool,
    permit: Mutex<Option<OwnedPermit>>,
    frees: AtomicUsize,
}

impl Tenant for Res {
    fn stamp(&self) -> &UseStamp {
        &self.stamp
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    fn free(&self) {
        let permit = self.permit.lock().unwrap().take();
        assert!(permit.is_some(), "value {} freed twice", self.id);
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

impl Refusal for Failure {
    fn exhausted(_capacity: usize) -> Self {
        Failure::Exhausted
    }

    fn closed() -> Self {
        Failure::Closed
    }

    fn released() -> Self {
        Failure::Released
    }
}

type Outcome = FlightOutcome<Res, Failure>;

/// How an acquire ended, for the models' coverage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Path {
    /// It waited on another caller's flight.
    joined: bool,
    /// It found a value it could not use (`Step::Again`), and whether it retired it.
    found_unusable: bool,
    rebuilt: bool,
    /// It led the flight.
    led: bool,
}

/// The session pool's shape around the directory.
struct Pool {
    directory: Directory<u8, Res, Failure>,
    /// Establishments started (connects).
    establishments: AtomicUsize,
    /// Establishments that fail, counting down (0: none fails).
    fail_next: AtomicUsize,
    /// Rebuilds counted (`Step::Again { rebuilt: true }`), as the pool's `rebuilt` counter.
    rebuilt: AtomicUsize,
    /// Every value ever created, to check each is freed exactly once.
    created: Mutex<Vec<Arc<Res>>>,
}

impl Pool {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Pool {
            directory: Directory::new(1, Arc::new(Limit::new(capacity).unwrap())),
            establishments: AtomicUsize::new(0),
            fail_next: AtomicUsize::new(0),
            rebuilt: AtomicUsize::new(0),
            created: Mutex::new(Vec::new()),
        })
    }

    fn limit(&self) -> &Limit {
        self.directory.limit()
    }

    /// `SessionPool::acquire` at time `now`.
    fn acquire(&self, key: u8, now: u64) -> Outcome {
        self.acquire_path(key, now).0
    }

    /// `SessionPool::acquire` at time `now`, with the path it took.
    fn acquire_path(&self, key: u8, now: u64) -> (Outcome, Path) {
        let key = self.directory.hashed(&key);
        let mut path = Path::default();
        // The hot path first, as the pool does: a lent, live, fresh value, or why not.
        match self.directory.lookup_fresh(key, || now, MAX_IDLE) {
            Ok(res) => return (Ok(res.into_arc()), path),
            Err(NotFresh::NotLent) => {}
            Err(NotFresh::Unusable { rebuilt }) => {
                path.found_unusable = true;
                if rebuilt {
                    path.rebuilt = true;
                    self.rebuilt.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        loop {
            let mut step = self.directory.lookup(key, || now, MAX_IDLE);
            if let Step::Vacant = step {
                step = self.directory.claim(key, || now, MAX_IDLE, || *key.key());
            }
            let flight = match step {
                Step::Ready(res) => return (Ok(res.into_arc()), path),
                Step::Join(flight) => {
                    path.joined = true;
                    flight
                }
                Step::Vacant => continue,
                Step::Again { rebuilt } => {
                    path.found_unusable = true;
                    if rebuilt {
                        path.rebuilt = true;
                        self.rebuilt.fetch_add(1, Ordering::SeqCst);
                    }
                    continue;
                }
                Step::Lead { flight, permit } => {
                    path.led = true;
                    self.establish(key, now, &flight, permit);
                    flight
                }
                Step::Exhausted => return (Err(self.directory.exhausted()), path),
                Step::Closed => return (Err(Failure::Closed), path),
            };
            return (block_on(Flight::wait(flight)), path);
        }
    }

    /// The leader's establishment, run inline (its placement on a task does not change the
    /// protocol): build a value that owns the permit, or fail on demand; install; complete.
    fn establish(
        &self,
        key: Hashed<'_, u8>,
        now: u64,
        flight: &Arc<Flight<Outcome>>,
        permit: OwnedPermit,
    ) {
        let id = self.establishments.fetch_add(1, Ordering::SeqCst);
        let fails = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fails {
            drop(permit);
            self.directory.abandon(key, flight);
            flight.complete(Err(Failure::Established));
            return;
        }
        let res = Arc::new(Res {
            id,
            stamp: UseStamp::new(now),
            alive: AtomicBool::new(true),
            permit: Mutex::new(Some(permit)),
            frees: AtomicUsize::new(0),
        });
        self.created.lock().unwrap().push(Arc::clone(&res));
        let outcome = self.directory.install(key, flight, res);
        flight.complete(outcome);
    }

    /// `SessionPool::release`.
    fn release(&self, key: u8) -> bool {
        self.directory.release(self.directory.hashed(&key))
    }

    /// `SessionPool::reap`.
    fn reap(&self, now: u64) -> usize {
        self.directory.reap(now, MAX_IDLE)
    }

    /// `SessionPool::stop`.
    fn stop(&self) {
        self.directory.close();
    }

    /// Every value created so far was freed exactly once.
    fn assert_each_freed_once(&self) {
        for res in self.created.lock().unwrap().iter() {
            assert_eq!(
                res.frees.load(Ordering::SeqCst),
                1,
                "value {} freed exactly once",
                res.id
            );
        }
    }

    /// After every thread is done: release what is left, then every value must have been
    /// freed exactly once and every permit returned.
    fn assert_settled(&self) {
        self.release(0);
        assert!(self.directory.registry().is_empty(), "no entry left behind");
        self.assert_each_freed_once();
        assert_eq!(
            self.limit().available(),
            self.limit().capacity(),
            "every permit returned"
        );
    }
}

/// Two concurrent acquires of one new session: one establishment, both get the same value
/// (the joiner is woken: loom reports a deadlock otherwise).
#[test]
fn single_flight_shares_one_establishment() {
    let reach = model(|reach| {
        let pool = Pool::new(2);
        let other = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire_path(0, 1))
        };
        let (mine, my_path) = pool.acquire_path(0, 1);
        let (theirs, their_path) = other.join().unwrap();
        let (mine, theirs) = (mine.unwrap(), theirs.unwrap());
        assert!(
            Arc::ptr_eq(&mine, &theirs),
            "both callers share one connection"
        );
        assert_eq!(pool.establishments.load(Ordering::SeqCst), 1);
        assert_eq!(pool.limit().in_use(), 1);
        if my_path.joined || their_path.joined {
            reach.hit("a caller joined the flight of the other");
        }
        pool.assert_settled();
    });
    reach
        .explored(2)
        .reached_all(&["a caller joined the flight of the other"]);
}

/// Three callers (two threads and the main one): still one establishment, one value.
#[test]
fn single_flight_three_callers() {
    let reach = model(|reach| {
        let pool = Pool::new(1);
        let others: Vec<_> = (0..2)
            .map(|_| {
                let pool = Arc::clone(&pool);
                thread::spawn(move || pool.acquire_path(0, 1))
            })
            .collect();
        let (mine, my_path) = pool.acquire_path(0, 1);
        let mine = mine.unwrap();
        let mut joined = usize::from(my_path.joined);
        for other in others {
            let (theirs, path) = other.join().unwrap();
            assert!(Arc::ptr_eq(&mine, &theirs.unwrap()));
            joined += usize::from(path.joined);
        }
        assert_eq!(pool.establishments.load(Ordering::SeqCst), 1);
        if joined == 2 {
            reach.hit("two callers joined the flight of the leader");
        }
        pool.assert_settled();
    });
    reach
        .explored(2)
        .reached_all(&["two callers joined the flight of the leader"]);
}

/// A failed establishment reaches every caller that joined it; a caller that arrives after
/// the flight ended starts a new one. No flight is left in the map, no permit is kept.
#[test]
fn single_flight_failure_reaches_joiners() {
    let reach = model(|reach| {
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
            1 => {
                assert_eq!(failed, 2);
                reach.hit("both joined the one failed flight");
            }
            // One met the failure, the other came after it and succeeded.
            2 => {
                assert_eq!(failed, 1);
                reach.hit("one met the failure, the other established after it");
            }
            n => panic!("{n} establishments for two callers"),
        }
        assert!(
            !matches!(
                pool.directory.registry().get(pool.directory.hashed(&0)),
                Some(Entry::Flying(_))
            ),
            "no flight left"
        );
        pool.assert_settled();
    });
    reach.explored(2).reached_all(&[
        "both joined the one failed flight",
        "one met the failure, the other established after it",
    ]);
}

/// Release racing a hot acquire of an active session (pool size 1). The acquire either got
/// the old value before it was retired, or rebuilt, or (tight race at full capacity) saw
/// `Exhausted`; in every case the old value is freed once and capacity comes back, so the
/// next acquire succeeds (a refused flight left in the map would refuse it).
#[test]
fn release_racing_acquire() {
    let reach = model(|reach| {
        let pool = Pool::new(1);
        let old = pool.acquire(0, 1).unwrap();
        let acquirer = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire(0, 2))
        };
        assert!(pool.release(0));
        match acquirer.join().unwrap() {
            Ok(got) if Arc::ptr_eq(&got, &old) => {
                reach.hit("the acquire got the old value before the release")
            }
            Ok(_) => reach.hit("the acquire rebuilt after the release"),
            Err(Failure::Exhausted) => reach.hit("the acquire met full capacity"),
            Err(Failure::Released) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
        assert!(old.stamp.is_retired());
        assert_eq!(
            old.frees.load(Ordering::SeqCst),
            1,
            "the released value is freed once"
        );
        let again = pool.acquire(0, 3);
        assert!(again.is_ok(), "capacity is back, yet {:?}", again.err());
        pool.assert_settled();
    });
    reach.explored(2).reached_all(&[
        "the acquire got the old value before the release",
        "the acquire rebuilt after the release",
        "the acquire met full capacity",
    ]);
}

/// Release of a session while its establishment is in flight: the leader's install is
/// refused, it frees the value itself, and the flight fails with `Released`.
#[test]
fn release_racing_establishment() {
    let reach = model(|reach| {
        let pool = Pool::new(1);
        let acquirer = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire(0, 1))
        };
        pool.release(0);
        match acquirer.join().unwrap() {
            Ok(_) => {}
            Err(Failure::Released) => reach.hit("the establishment was refused by the release"),
            Err(other) => panic!("unexpected {other:?}"),
        }
        pool.assert_settled();
    });
    reach
        .explored(2)
        .reached_all(&["the establishment was refused by the release"]);
}

/// The reaper racing a hot acquire of a session idle for exactly the bound at the acquire's
/// time but past it at the reaper's: exactly one wins (refresh or retire), never both.
/// (Capacity 2, so a rebuild never meets the old permit not yet dropped.)
#[test]
fn reap_racing_touch() {
    let reach = model(|reach| {
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
            reach.hit("the touch refreshed first, the reaper kept it");
        } else {
            // The reaper retired the old value first; the acquire rebuilt.
            assert_eq!(reaped, 1);
            assert!(old.stamp.is_retired());
            reach.hit("the reaper retired first, the acquire rebuilt");
        }
        pool.assert_settled();
    });
    reach.explored(2).reached_all(&[
        "the touch refreshed first, the reaper kept it",
        "the reaper retired first, the acquire rebuilt",
    ]);
}

/// An acquire whose clock says the session is stale races one whose (earlier) clock says it
/// is fresh. Either the fresh touch lands first, and the stale check's retirement then fails
/// (the value was just used: both callers get it, nobody rebuilds), or the retirement lands
/// first and exactly one rebuild follows, which both callers share. A stale check that
/// retired without re-checking idleness at the moment of its CAS would retire a value the
/// fresh caller was just handed.
#[test]
fn stale_check_racing_fresh_touch() {
    let reach = model(|reach| {
        let pool = Pool::new(2);
        let old = pool.acquire(0, 0).unwrap();
        let stale = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire_path(0, MAX_IDLE + 5))
        };
        let (fresh, _) = pool.acquire_path(0, MAX_IDLE);
        let (stale, stale_path) = stale.join().unwrap();
        let (fresh, stale) = (fresh.unwrap(), stale.unwrap());
        let rebuilt = pool.rebuilt.load(Ordering::SeqCst);
        if Arc::ptr_eq(&fresh, &old) {
            // The touch won: the value the fresh caller holds was not retired under it.
            assert!(!old.stamp.is_retired(), "retired a value just handed out");
            assert!(Arc::ptr_eq(&stale, &old));
            assert_eq!(rebuilt, 0);
            if stale_path.found_unusable {
                // The stale check saw it idle, then lost its retirement to the touch.
                reach.hit("the stale check lost its retirement to the touch");
            }
        } else {
            assert!(old.stamp.is_retired());
            assert_eq!(old.frees.load(Ordering::SeqCst), 1);
            assert_eq!(rebuilt, 1, "exactly one rebuild counted");
            reach.hit("the retirement came first, one rebuild");
        }
        pool.assert_settled();
    });
    reach.explored(2).reached_all(&[
        "the stale check lost its retirement to the touch",
        "the retirement came first, one rebuild",
    ]);
}

/// Two acquires find the same session stale at once: exactly one of them retires it (frees
/// it, counts the rebuild), the other sees it retired, and both end with the one new value.
#[test]
fn two_stale_checks_retire_once() {
    let reach = model(|reach| {
        let pool = Pool::new(2);
        let old = pool.acquire(0, 0).unwrap();
        let other = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire_path(0, MAX_IDLE + 5))
        };
        let (mine, my_path) = pool.acquire_path(0, MAX_IDLE + 5);
        let (theirs, their_path) = other.join().unwrap();
        let (mine, theirs) = (mine.unwrap(), theirs.unwrap());
        assert!(Arc::ptr_eq(&mine, &theirs), "one rebuild, shared");
        assert!(!Arc::ptr_eq(&mine, &old));
        assert_eq!(old.frees.load(Ordering::SeqCst), 1, "retired once");
        assert_eq!(
            pool.rebuilt.load(Ordering::SeqCst),
            1,
            "one rebuild counted"
        );
        assert_eq!(pool.establishments.load(Ordering::SeqCst), 2);
        if my_path.found_unusable
            && their_path.found_unusable
            && my_path.rebuilt != their_path.rebuilt
        {
            // Both found it unusable; one retired it, the other lost the stamp.
            reach.hit("both found it stale, one retired it");
        }
        pool.assert_settled();
    });
    reach
        .explored(2)
        .reached_all(&["both found it stale, one retired it"]);
}

/// Two acquires find the same session dead at once (its connection went down): exactly one
/// retires and frees it, and they share one rebuild.
#[test]
fn two_dead_checks_retire_once() {
    let reach = model(|reach| {
        let pool = Pool::new(2);
        let old = pool.acquire(0, 0).unwrap();
        old.alive.store(false, Ordering::SeqCst);
        let other = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire_path(0, 1))
        };
        let (mine, my_path) = pool.acquire_path(0, 1);
        let (theirs, their_path) = other.join().unwrap();
        assert!(Arc::ptr_eq(&mine.unwrap(), &theirs.unwrap()));
        assert_eq!(old.frees.load(Ordering::SeqCst), 1, "retired once");
        assert_eq!(
            pool.rebuilt.load(Ordering::SeqCst),
            1,
            "one rebuild counted"
        );
        if my_path.found_unusable && their_path.found_unusable {
            reach.hit("both found it dead");
        }
        pool.assert_settled();
    });
    reach.explored(2).reached_all(&["both found it dead"]);
}

/// Stop racing an establishment: whatever the order, the new value is freed exactly once
/// and the caller sees it or `Closed`.
#[test]
fn stop_racing_establishment() {
    let reach = model(|reach| {
        let pool = Pool::new(1);
        let acquirer = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire_path(0, 1))
        };
        pool.stop();
        match acquirer.join().unwrap() {
            (Ok(res), _) => assert!(res.stamp.is_retired(), "stop retired it"),
            (Err(Failure::Closed), path) => {
                // The leader's install was refused by the close (or it never led).
                reach.hit(if path.led {
                    "the install of the leader was refused by the stop"
                } else {
                    "the stop came before it led"
                });
            }
            (Err(other), _) => panic!("unexpected {other:?}"),
        }
        assert!(matches!(pool.acquire(0, 2), Err(Failure::Closed)));
        pool.assert_each_freed_once();
        assert_eq!(pool.limit().available(), 1);
    });
    reach.explored(2).reached_all(&[
        "the install of the leader was refused by the stop",
        "the stop came before it led",
    ]);
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
    let reach = model(|reach| {
        let batch = Arc::new(Batch::new());
        let taken = Arc::new(Mutex::new(Vec::new()));
        let producer = {
            let (batch, taken) = (Arc::clone(&batch), Arc::clone(&taken));
            thread::spawn(move || push_and_maybe_drain(&batch, &taken, 0))
        };
        let mine = push_and_maybe_drain(&batch, &taken, 1);
        let theirs = producer.join().unwrap();
        // One drain served both pushes, or each push scheduled its own.
        reach.hit(if mine.is_some() && theirs.is_some() {
            "each push scheduled its own drain"
        } else {
            "one drain served both pushes"
        });
        for drain in [mine, theirs].into_iter().flatten() {
            drain.join().unwrap();
        }
        let mut got = taken.lock().unwrap().clone();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1], "every item taken exactly once");
        assert!(batch.is_empty(), "nothing stranded");
    });
    reach.explored(2).reached_all(&[
        "one drain served both pushes",
        "each push scheduled its own drain",
    ]);
}

/// A scheduled starter that never runs (its runtime shut down) gives up its turn: the items it
/// would have taken stay queued, and the next push schedules a drain that takes them all.
#[test]
fn batch_unscheduled_drain_hands_over() {
    let reach = model(|reach| {
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
        if scheduled_and_dropped && !mine_claimed {
            // The dropped drain's item (and mine) waited for the next push's drain.
            reach.hit("the next push drained what the dropped drain left");
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
    reach
        .explored(2)
        .reached_all(&["the next push drained what the dropped drain left"]);
}
