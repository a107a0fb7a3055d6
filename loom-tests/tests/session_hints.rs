#![cfg(slotpool_loom)]
//! Loom models of the session directory's hints: the lock-free hot read that takes a prepaid
//! reference to a finished value (`slotpool::__internal::flight`, `hint.rs`), racing everything that
//! withdraws or refills a hint.
//!
//! A hit CASes the hint word's `taken` count up and owns one of the references its lease was
//! set up with; a release, a retirement by the reaper and a close withdraw the word (swap it
//! empty, give back the references it still owned), a reader that finds a spent word
//! (`taken == PREPAID`, two under loom) refills it under the write lock, and an install
//! whose key's two words are both taken moves an occupant to the occupant's other word.
//!
//! Two canaries catch a reference counted wrong:
//!
//! * the value ([`Res`]) counts the handles that use it, and its `Drop` asserts that none
//!   does and that it runs once: a lease freed while a handle still reads through it drops
//!   its value clone early, and a value kept by nothing else (the models keep no other clone)
//!   is then dropped under a handle;
//! * under loom the crate poisons a freed lease instead of deallocating it, and asserts on any
//!   later use or second free (`a lease used after it was freed`, `a lease freed twice`).
//!
//! At the end of every execution every value created was dropped exactly once and freed
//! (its permit returned) exactly once, so a reference given back too few times (a leak) fails
//! as well.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --test session_hints --target-dir target/loom`.

use loom::future::block_on;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use slotpool::__internal::flight::{
    Directory, Flight, Lent, Outcome as FlightOutcome, Refusal, Step, Tenant, UseStamp,
};
use slotpool::__internal::limit::{Limit, OwnedPermit};
use slotpool_loom_tests::model;

/// Idle bound of every model (nanoseconds): a touch within `MAX_IDLE / TOUCH_SLACK` (2) of
/// the stamp writes nothing.
const MAX_IDLE: u64 = 64;

/// What every value of one execution counts, outside the values (which must not outlive it).
#[derive(Default)]
struct Counts {
    created: AtomicUsize,
    freed: AtomicUsize,
    dropped: AtomicUsize,
}

/// Stands in for `Live`: a use stamp, liveness, the permit it owns until retired, and the
/// canary (handles in use; a drop under one fails).
struct Res {
    stamp: UseStamp,
    alive: AtomicBool,
    permit: Mutex<Option<OwnedPermit>>,
    /// Handles that use this value now.
    holders: AtomicUsize,
    counts: Arc<Counts>,
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
        assert!(permit.is_some(), "value freed twice");
        drop(permit);
        self.counts.freed.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Res {
    fn drop(&mut self) {
        assert_eq!(
            self.holders.load(Ordering::SeqCst),
            0,
            "a value dropped while a handle uses it"
        );
        self.counts.dropped.fetch_add(1, Ordering::SeqCst);
        // What the pool's `Live` does: retire (and free) a value nobody retired.
        slotpool::__internal::flight::retire(self);
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Failure {
    Exhausted,
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

/// A handle as a `Session` holds it: the lent value, counted in its canary while held.
struct Held {
    lent: Lent<Res>,
}

impl Held {
    fn new(lent: Lent<Res>) -> Self {
        lent.holders.fetch_add(1, Ordering::SeqCst);
        Held { lent }
    }

    /// Whether it came through a hint (a prepaid reference) rather than an `Arc` clone.
    fn leased(&self) -> bool {
        matches!(self.lent, Lent::Leased(_))
    }

    fn same(&self, other: &Held) -> bool {
        self.lent.ptr_eq(&other.lent)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Reads through the handle one last time, as a session's user would.
        let _ = self.lent.stamp.is_retired();
        self.lent.holders.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The session pool's shape around the directory (one shard, so every key shares it).
struct Pool {
    directory: Directory<u8, Res, Failure>,
    counts: Arc<Counts>,
}

impl Pool {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Pool {
            directory: Directory::new(1, Arc::new(Limit::new(capacity).unwrap())),
            counts: Arc::new(Counts::default()),
        })
    }

    /// `SessionPool::acquire` at `now`.
    fn acquire(&self, key: u8, now: u64) -> Result<Held, Failure> {
        let key = self.directory.hashed(&key);
        // The hot path first, as the pool does.
        if let Ok(lent) = self.directory.lookup_fresh(key, || now, MAX_IDLE) {
            return Ok(Held::new(lent));
        }
        loop {
            let mut step = self.directory.lookup(key, || now, MAX_IDLE);
            if let Step::Vacant = step {
                step = self.directory.claim(key, || now, MAX_IDLE, || *key.key());
            }
            let flight = match step {
                Step::Ready(lent) => return Ok(Held::new(lent)),
                Step::Join(flight) => flight,
                Step::Vacant | Step::Again { .. } => continue,
                Step::Lead { flight, permit } => {
                    let res = Arc::new(Res {
                        stamp: UseStamp::new(now),
                        alive: AtomicBool::new(true),
                        permit: Mutex::new(Some(permit)),
                        holders: AtomicUsize::new(0),
                        counts: Arc::clone(&self.counts),
                    });
                    self.counts.created.fetch_add(1, Ordering::SeqCst);
                    let outcome = self.directory.install(key, &flight, res);
                    flight.complete(outcome);
                    flight
                }
                Step::Exhausted => return Err(self.directory.exhausted()),
                Step::Closed => return Err(Failure::Closed),
            };
            let outcome: FlightOutcome<Res, Failure> = block_on(Flight::wait(flight));
            return outcome.map(|res| Held::new(res.into()));
        }
    }

    fn release(&self, key: u8) -> bool {
        self.directory.release(self.directory.hashed(&key))
    }
}

/// Closes the pool, drops it, and checks that every value was freed and dropped exactly once.
fn settle(pool: Arc<Pool>) {
    pool.directory.close();
    let counts = Arc::clone(&pool.counts);
    drop(pool);
    let created = counts.created.load(Ordering::SeqCst);
    assert_eq!(
        counts.freed.load(Ordering::SeqCst),
        created,
        "each value freed once"
    );
    assert_eq!(
        counts.dropped.load(Ordering::SeqCst),
        created,
        "each value dropped once"
    );
}

/// A hot read racing a release of its session: the reader either takes a reference through
/// the hint before the withdrawal (and keeps using a retired value, whose lease outlives the
/// word) or misses it and establishes anew; the withdrawal settles the word's references
/// exactly, whichever CAS came first.
#[test]
fn hit_racing_release() {
    let reach = model(|reach| {
        let pool = Pool::new(2);
        drop(pool.acquire(0, 0).unwrap());
        let reader = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || {
                let held = pool.acquire(0, 1).unwrap();
                let leased = held.leased();
                drop(held);
                leased
            })
        };
        assert!(pool.release(0));
        if reader.join().unwrap() {
            reach.hit("the reader took a prepaid reference");
        } else {
            reach.hit("the reader missed the withdrawn hint");
        }
        settle(pool);
    });
    reach.explored(2).reached_all(&[
        "the reader took a prepaid reference",
        "the reader missed the withdrawn hint",
    ]);
}

/// Two hot readers racing a release: their CASes on one word and the withdrawal's swap are
/// ordered, so the word's final count is exactly the references they took.
#[test]
fn two_hits_racing_release() {
    let reach = model(|reach| {
        let pool = Pool::new(2);
        drop(pool.acquire(0, 0).unwrap());
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let pool = Arc::clone(&pool);
                thread::spawn(move || {
                    let held = pool.acquire(0, 1).unwrap();
                    held.leased()
                })
            })
            .collect();
        assert!(pool.release(0));
        let hits = readers
            .into_iter()
            .map(|reader| reader.join().unwrap())
            .filter(|&leased| leased)
            .count();
        if hits == 2 {
            reach.hit("both readers hit");
        }
        settle(pool);
    });
    reach.explored(2).reached_all(&["both readers hit"]);
}

/// A hot read racing the reaper: the reader's hit refreshes the stamp (the reaper then keeps
/// the value), or the reaper retires it first (and withdraws its hint; the reader, holding a
/// reference to a retired value or missing the word, establishes anew).
#[test]
fn hit_racing_reaper() {
    let reach = model(|reach| {
        let pool = Pool::new(2);
        drop(pool.acquire(0, 0).unwrap());
        let reaper = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.directory.reap(MAX_IDLE + 5, MAX_IDLE))
        };
        let held = pool.acquire(0, MAX_IDLE).unwrap();
        let reaped = reaper.join().unwrap();
        match (reaped, held.leased()) {
            (0, true) => reach.hit("the hit refreshed first, the reaper kept it"),
            (0, false) => panic!("kept, yet the reader was not handed the hinted value"),
            (_, false) => reach.hit("the reaper retired first, the reader rebuilt"),
            (_, true) => panic!("reaped, yet the reader's hit returned the value"),
        }
        drop(held);
        settle(pool);
    });
    reach.explored(2).reached_all(&[
        "the hit refreshed first, the reaper kept it",
        "the reaper retired first, the reader rebuilt",
    ]);
}

/// A hot read racing close: the reader gets the value through its hint before the close
/// withdraws every word, or is told the pool is closed; the close's withdrawal and the
/// reader's drop give the lease's references back exactly once between them.
#[test]
fn hit_racing_close() {
    let reach = model(|reach| {
        let pool = Pool::new(2);
        drop(pool.acquire(0, 0).unwrap());
        let reader = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || match pool.acquire(0, 1) {
                Ok(held) => {
                    let leased = held.leased();
                    drop(held);
                    Some(leased)
                }
                Err(Failure::Closed) => None,
                Err(other) => panic!("unexpected {other:?}"),
            })
        };
        pool.directory.close();
        match reader.join().unwrap() {
            Some(true) => reach.hit("the reader hit before the close"),
            Some(false) => panic!("a value found only under the lock"),
            None => reach.hit("the reader found the pool closed"),
        }
        settle(pool);
    });
    reach.explored(2).reached_all(&[
        "the reader hit before the close",
        "the reader found the pool closed",
    ]);
}

/// A spent word (`taken == PREPAID`, two under loom) refilled by the reader that found it,
/// racing another hot read and the drop of the handles that spent it: the refill restores
/// the references readers took before it publishes the word again, so a reader that hits the
/// refilled word owns a reference the lease really holds.
#[test]
fn refill_of_a_spent_hint() {
    let reach = model(|reach| {
        let pool = Pool::new(2);
        drop(pool.acquire(0, 0).unwrap());
        let first = pool.acquire(0, 1).unwrap();
        let second = pool.acquire(0, 1).unwrap();
        assert!(first.leased() && second.leased(), "two hits spend the word");
        let dropper = thread::spawn(move || {
            drop(first);
            drop(second);
        });
        let reader = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || {
                let held = pool.acquire(0, 1).unwrap();
                held.leased()
            })
        };
        // Finds the word spent and refills it (or finds it refilled by then, and hits).
        let refiller = pool.acquire(0, 1).unwrap();
        dropper.join().unwrap();
        let reader_hit = reader.join().unwrap();
        if reader_hit && !refiller.leased() {
            reach.hit("a hit on the word another reader refilled");
        }
        let again = pool.acquire(0, 1).unwrap();
        assert!(again.same(&refiller), "one value throughout");
        drop((refiller, again));
        settle(pool);
    });
    reach
        .explored(2)
        .reached_all(&["a hit on the word another reader refilled"]);
}

/// Three keys of a pool of `capacity` (one shard): `a` and `b` in different words, and `c`
/// whose two words are `a`'s first and `b`'s first, with `a`'s second word free. Installing
/// `a`, then `b`, then `c` moves `a` to its second word.
fn colliding_keys(pool: &Pool) -> (u8, u8, u8) {
    let words = |key: u8| {
        pool.directory
            .hint_words(pool.directory.hashed(&key))
            .expect("the shard has hint words")
    };
    for c in 0..=u8::MAX {
        let [c_first, c_second] = words(c);
        for a in (0..=u8::MAX).filter(|&a| a != c) {
            let [a_first, a_second] = words(a);
            if a_first != c_first || a_second == c_second {
                continue;
            }
            if let Some(b) = (0..=u8::MAX).find(|&b| b != a && b != c && words(b)[0] == c_second) {
                return (a, b, c);
            }
        }
    }
    panic!("no three keys collide so");
}

/// An install that moves a hot key's lease to the key's other word, racing a hot read of that
/// key: the reader hits the old word before the move, the new word after it, or misses both
/// in between and finds the value under the lock; every way, it gets the one value, and the
/// move's swap orders the reader's CAS before or after it, so the references the word owned
/// are counted exactly (the canaries: no lease used after its free, freed twice or leaked).
/// After the move all three keys are lent through words.
#[test]
fn a_move_racing_a_hit_on_the_moved_key() {
    let reach = model(|reach| {
        let pool = Pool::new(3);
        let (a, b, c) = colliding_keys(&pool);
        let first = pool.acquire(a, 0).unwrap();
        drop(pool.acquire(b, 0).unwrap());
        let reader = {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.acquire(a, 1).unwrap())
        };
        // Installs `c`, moving `a`'s lease out of `c`'s first word.
        drop(pool.acquire(c, 1).unwrap());
        let read = reader.join().unwrap();
        assert!(read.same(&first), "one value of `a` throughout");
        if read.leased() {
            reach.hit("the reader hit a word of `a`");
        } else {
            reach.hit("the reader missed the moving word and took the lock");
        }
        for key in [a, b, c] {
            let held = pool.acquire(key, 1).unwrap();
            assert!(held.leased(), "key {key} has a word after the move");
        }
        drop((first, read));
        settle(pool);
    });
    reach.explored(2).reached_all(&[
        "the reader hit a word of `a`",
        "the reader missed the moving word and took the lock",
    ]);
}
