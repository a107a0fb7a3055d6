//! Stress tests of the slot table on a multi-threaded runtime: many tasks reserve (waiting,
//! trying, or polling once and cancelling), start, fail and release slots while a reaper
//! retires idle ones, and a test-side shadow count checks at every step that no slot is ever
//! loaded past its cap. At the end every unit is back, no waiter is left, every unit of
//! capacity can be reserved again, and releases balance reservations exactly. Bounded in
//! operations, never in time.

mod common;
mod stress_common;

use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slotpool::__internal::slots::{Capacity, Phase, Reservation, SlotTable};
use slotpool::TryAcquireError;

use common::{join_all, poll_once};
use stress_common::assert_served_in_queue_order;

/// A table plus the test's own count of units held per slot.
struct Shadow {
    table: SlotTable,
    /// Units the tasks hold on each slot: raised after a reservation, lowered before its
    /// release, so it never exceeds the table's own load.
    held: Vec<AtomicU32>,
    reserved: AtomicU64,
    released: AtomicU64,
    cancelled: AtomicU64,
    drained: AtomicU64,
}

impl Shadow {
    fn new(capacity: Capacity, max_load: u32, shadow_slots: usize) -> Arc<Self> {
        Arc::new(Self {
            table: SlotTable::new(capacity, max_load).expect("valid table"),
            held: (0..shadow_slots).map(|_| AtomicU32::new(0)).collect(),
            reserved: AtomicU64::new(0),
            released: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            drained: AtomicU64::new(0),
        })
    }

    /// Takes `r` into the task's hands: checks the cap, and plays the claimer's part (the
    /// resource opens, or fails to open and the slot drains).
    fn hold(&self, r: Reservation, rng: &mut SmallRng) -> Reservation {
        let held = self
            .held
            .get(r.index())
            .unwrap_or_else(|| panic!("slot {} beyond the shadow", r.index()));
        let before = held.fetch_add(1, Ordering::SeqCst);
        assert!(
            before < self.table.max_load(),
            "slot {} loaded past its cap {}",
            r.index(),
            self.table.max_load()
        );
        self.reserved.fetch_add(1, Ordering::Relaxed);
        if r.claimed() {
            // Only the claimer moves its incarnation out of Starting (as a pool's spin-up does).
            if rng.random_ratio(1, 10) {
                // The resource failed to open: nobody may join it any more.
                assert_eq!(
                    self.table.begin_drain(r.index(), r.generation()),
                    Some(Phase::Starting)
                );
                self.drained.fetch_add(1, Ordering::Relaxed);
            } else {
                assert!(self.table.mark_ready(r.index(), r.generation()));
                if rng.random_ratio(1, 20) {
                    // It opened and failed at once, with joiners perhaps on it already: one
                    // of them may have drained it first (it was Ready when it looked), and
                    // our unit keeps the incarnation alive, so it is Ready or Draining.
                    match self.table.begin_drain(r.index(), r.generation()) {
                        Some(phase) => {
                            assert_eq!(phase, Phase::Ready);
                            self.drained.fetch_add(1, Ordering::Relaxed);
                        }
                        None => {
                            let word = self.table.word(r.index()).expect("a held slot");
                            assert_eq!(
                                (word.generation(), word.phase()),
                                (r.generation(), Phase::Draining),
                                "a held incarnation ended"
                            );
                        }
                    }
                }
            }
        } else if rng.random_ratio(1, 30)
            && self
                .table
                .word(r.index())
                .is_some_and(|w| w.generation() == r.generation() && w.phase() == Phase::Ready)
        {
            // The resource failed while serving. It was Ready and our unit keeps it from
            // being reaped, so it is Ready still, or another holder drained it first.
            if self.table.begin_drain(r.index(), r.generation()).is_some() {
                self.drained.fetch_add(1, Ordering::Relaxed);
            }
        }
        r
    }

    fn give_back(&self, r: Reservation) {
        self.held[r.index()].fetch_sub(1, Ordering::SeqCst);
        assert!(
            self.table.release(r),
            "the release of a held reservation {r:?} was refused"
        );
        self.released.fetch_add(1, Ordering::Relaxed);
    }

    /// The end state: nothing held, nobody waiting, every unit of capacity reservable once
    /// (and no more), releases balancing reservations.
    fn assert_settled(&self) {
        assert!(self.held.iter().all(|h| h.load(Ordering::SeqCst) == 0));
        assert_eq!(
            self.reserved.load(Ordering::SeqCst),
            self.released.load(Ordering::SeqCst),
            "reservations and releases do not balance"
        );
        let stats = self.table.stats();
        assert_eq!(stats.in_flight, 0, "load left behind: {stats:?}");
        assert_eq!(stats.waiting, 0, "a waiter left in the queue: {stats:?}");
        assert!(!self.table.gate().has_waiters());
        assert_eq!(
            stats.empty + stats.starting + stats.ready + stats.draining,
            stats.slots
        );
        assert_eq!((stats.starting, stats.draining), (0, 0), "{stats:?}");
        if let Some(slots) = self.table.capacity() {
            let units = slots * self.table.max_load() as usize;
            let mut again = Vec::with_capacity(units);
            for _ in 0..units {
                again.push(self.table.try_reserve().expect("capacity hidden or lost"));
            }
            assert_eq!(self.table.try_reserve(), Err(TryAcquireError::NoCapacity));
            for r in again {
                assert!(self.table.release(r));
            }
            assert_eq!(self.table.stats().in_flight, 0);
        }
    }
}

/// One task's work: `rounds` random operations, each of which ends with nothing held.
async fn worker(shadow: Arc<Shadow>, seed: u64, rounds: usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    for _ in 0..rounds {
        match rng.random_range(0..10) {
            // Wait for a unit, hold it across a yield (others run meanwhile), give it back.
            0..=3 => {
                let r = shadow.table.reserve().await.expect("table not closed");
                let r = shadow.hold(r, &mut rng);
                tokio::task::yield_now().await;
                shadow.give_back(r);
            }
            // Try without waiting; with a unit in hand, try for a second one.
            4..=5 => match shadow.table.try_reserve() {
                Ok(r) => {
                    let r = shadow.hold(r, &mut rng);
                    let second = shadow.table.try_reserve().ok();
                    let second = second.map(|s| shadow.hold(s, &mut rng));
                    tokio::task::yield_now().await;
                    shadow.give_back(r);
                    if let Some(s) = second {
                        shadow.give_back(s);
                    }
                }
                Err(e) => assert_eq!(e, TryAcquireError::NoCapacity),
            },
            // Poll a reservation once and drop it (a caller that gives up): a unit it was
            // handed meanwhile goes to the next waiter.
            6..=8 => {
                let mut fut = pin!(shadow.table.reserve());
                match poll_once(fut.as_mut()) {
                    Poll::Ready(r) => {
                        let r = shadow.hold(r.expect("table not closed"), &mut rng);
                        shadow.give_back(r);
                    }
                    Poll::Pending => {
                        tokio::task::yield_now().await;
                        shadow.cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            _ => tokio::task::yield_now().await,
        }
    }
}

/// Reaper passes at a moving clock (a slot idle through two passes is retired) until `done`,
/// then two more, which retire every slot left idle.
async fn reaper(shadow: Arc<Shadow>, done: Arc<AtomicBool>) {
    let mut now = 0;
    let mut after_done = 0;
    while after_done < 2 {
        if done.load(Ordering::SeqCst) {
            after_done += 1;
        }
        now += 1;
        shadow.table.reap_idle(now, 1, |_, ()| {});
        tokio::task::yield_now().await;
    }
}

async fn run(shadow: &Arc<Shadow>, tasks: u64, rounds: usize) {
    let done = Arc::new(AtomicBool::new(false));
    let reaping = tokio::spawn(reaper(Arc::clone(shadow), Arc::clone(&done)));
    let workers = (0..tasks)
        .map(|seed| tokio::spawn(worker(Arc::clone(shadow), seed, rounds)))
        .collect();
    join_all(workers).await;
    done.store(true, Ordering::SeqCst);
    reaping.await.expect("the reaper did not panic");
    let stats = shadow.table.stats();
    assert_eq!(
        stats.ready, 0,
        "an idle slot outlived two reaper passes: {stats:?}"
    );
}

/// A bounded table of 4 slots of depth 3 under 48 tasks: waits, cancellations, failed
/// spin-ups, drains and reaping, all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bounded_table_under_many_tasks_balances_exactly() {
    let shadow = Shadow::new(Capacity::Bounded(4), 3, 4);
    run(&shadow, 48, 1000).await;
    shadow.assert_settled();
    let reserved = shadow.reserved.load(Ordering::SeqCst);
    assert!(reserved > 48 * 300, "too few reservations: {reserved}");
    assert!(shadow.drained.load(Ordering::SeqCst) > 0);
    assert!(shadow.cancelled.load(Ordering::SeqCst) > 0);
}

/// An unbounded table grows while it is reserved from and reaped: every task first holds four
/// units at once (more than the first segment carries), then runs the random mix. No slot
/// moves, none is overloaded, and the table grows only as far as the load needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unbounded_table_grows_under_contention() {
    const TASKS: usize = 48;
    const HOLD: usize = 4;
    let shadow = Shadow::new(Capacity::Unbounded, 2, 1024);
    let first = shadow.table.stats().slots;
    assert!(
        TASKS * HOLD > first * 2,
        "the burst must outgrow the first segment"
    );
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let bursts = (0..TASKS as u64)
        .map(|seed| {
            let (shadow, barrier) = (Arc::clone(&shadow), Arc::clone(&barrier));
            tokio::spawn(async move {
                let mut rng = SmallRng::seed_from_u64(1000 + seed);
                let mut held = Vec::new();
                for _ in 0..HOLD {
                    let r = shadow
                        .table
                        .try_reserve()
                        .expect("an unbounded table grows");
                    held.push(shadow.hold(r, &mut rng));
                }
                barrier.wait().await;
                for r in held {
                    shadow.give_back(r);
                }
            })
        })
        .collect();
    join_all(bursts).await;
    // TASKS * HOLD units at most at once, and draining slots hold some back: two doublings
    // of the first segment carry them.
    let grown = shadow.table.stats().slots;
    assert!(grown > first && grown <= first * 4, "grew to {grown} slots");
    run(&shadow, TASKS as u64, 500).await;
    shadow.assert_settled();
    assert!(shadow.table.stats().slots <= first * 4);
}

/// Waiters are served in the order they queued, cancelled ones skipped: each release hands its
/// unit to the oldest waiter still queued, so a caller that did not wait (here the releaser
/// itself, trying again at once) finds no unit while anyone is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_are_served_first_in_first_out() {
    let shadow = Shadow::new(Capacity::Bounded(2), 2, 2);
    let mut full = Vec::new();
    while let Ok(r) = shadow.table.try_reserve() {
        if r.claimed() {
            assert!(shadow.table.mark_ready(r.index(), r.generation()));
        }
        full.push(r);
    }
    let first = full.pop().expect("a full table");
    let waiter_shadow = Arc::clone(&shadow);
    let barged = Arc::new(AtomicU64::new(0));
    let barging = Arc::clone(&barged);
    assert_served_in_queue_order(
        32,
        7,
        move |id, served| {
            let (shadow, barged) = (Arc::clone(&waiter_shadow), Arc::clone(&barging));
            async move {
                let r = shadow.table.reserve().await.expect("table not closed");
                served.lock().push(id);
                assert!(shadow.table.release(r));
                if let Ok(again) = shadow.table.try_reserve() {
                    // The unit was free: nobody was queued when it came back, and nobody
                    // queues any more.
                    if shadow.table.stats().waiting > 0 {
                        barged.fetch_add(1, Ordering::SeqCst);
                    }
                    assert!(shadow.table.release(again));
                }
            }
        },
        || shadow.table.stats().waiting,
        || assert!(shadow.table.release(first)),
    )
    .await;
    assert!(
        barged.load(Ordering::SeqCst) == 0,
        "{} callers took a unit a queued waiter was owed",
        barged.load(Ordering::SeqCst)
    );
    for r in full {
        assert!(shadow.table.release(r));
    }
    let stats = shadow.table.stats();
    assert_eq!((stats.in_flight, stats.waiting), (0, 0), "{stats:?}");
}
