//! Shuttle tests of the slot table and the gate under it, at a scale loom cannot enumerate:
//! many threads reserving (waiting, trying, or polling once and cancelling), starting,
//! failing and releasing slots while a reaper retires idle ones; an unbounded table growing
//! while it is reserved from and reaped; a limiter's waiters handed permits and cancelled.
//! The real code runs with shuttle's primitives (`--cfg slotpool_shuttle`); a lost wake-up
//! shows as a deadlock, which shuttle reports with the schedule that led to it.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_shuttle" cargo test --release -p slotpool-loom-tests
//! --target-dir target/shuttle --test shuttle_slots` (the budget: see the crate docs).
#![cfg(slotpool_shuttle)]

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use shuttle::future::block_on;
use shuttle::thread;
use slotpool::__internal::limit::Limit;
use slotpool::__internal::slots::{Capacity, Phase, Reservation, SlotTable};
use slotpool::TryAcquireError;
use slotpool_loom_tests::{explore, waited, Reach};

fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// A table and the test's own count of units held per slot (raised after a reservation,
/// lowered before its release: never above the table's load).
struct Held {
    table: SlotTable,
    per_slot: Vec<AtomicU32>,
}

impl Held {
    fn new(capacity: Capacity, max_load: u32, shadow: usize) -> Arc<Self> {
        Arc::new(Self {
            table: SlotTable::new(capacity, max_load).unwrap(),
            per_slot: (0..shadow).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Takes `r` into hand: checks the cap and plays the claimer (opens the resource, or with
    /// `fail` lets it fail to open, which drains the slot).
    fn hold(&self, r: Reservation, fail: bool, reach: &Reach) -> Reservation {
        let before = self.per_slot[r.index()].fetch_add(1, Ordering::SeqCst);
        assert!(
            before < self.table.max_load(),
            "slot {} loaded past its cap",
            r.index()
        );
        if r.claimed() {
            if fail {
                assert_eq!(
                    self.table.begin_drain(r.index(), r.generation()),
                    Some(Phase::Starting)
                );
                reach.hit("a spin-up failed and drained its slot");
            } else {
                assert!(self.table.mark_ready(r.index(), r.generation()));
            }
        }
        r
    }

    fn give_back(&self, r: Reservation) {
        self.per_slot[r.index()].fetch_sub(1, Ordering::SeqCst);
        assert!(self.table.release(r), "a held reservation was refused");
    }

    /// Nothing held, nobody queued, and every unit of a bounded table reservable once more.
    fn assert_settled(&self) {
        let stats = self.table.stats();
        assert_eq!((stats.in_flight, stats.waiting), (0, 0), "{stats:?}");
        assert!(!self.table.gate().has_waiters());
        if let Some(slots) = self.table.capacity() {
            let units = slots * self.table.max_load() as usize;
            let again: Vec<_> = (0..units)
                .map(|_| self.table.try_reserve().expect("capacity hidden or lost"))
                .collect();
            assert_eq!(self.table.try_reserve(), Err(TryAcquireError::NoCapacity));
            for r in again {
                assert!(self.table.release(r));
            }
        }
    }
}

/// A thread running `passes` reaper passes on a moving clock (a slot idle through two passes
/// is retired).
fn spawn_reaper(held: &Arc<Held>, reach: &Reach, passes: u64) -> thread::JoinHandle<()> {
    let (held, reach) = (Arc::clone(held), reach.clone());
    thread::spawn(move || {
        for now in 1..=passes {
            held.table
                .reap_idle(now, 1, |_, ()| reach.hit("the reaper retired a slot"));
            thread::yield_now();
        }
    })
}

/// Six threads on a bounded table of three slots of depth two (six units), each running a mix
/// of waits, tries, cancellations after one poll and double holds, some of their spin-ups
/// failing, while a reaper retires idle slots: the cap holds at every step, no waiter sleeps
/// while a unit is free (shuttle reports the deadlock), and everything balances at the end.
#[test]
fn many_threads_reserve_cancel_fail_and_reap() {
    const THREADS: usize = 6;
    const OPS: usize = 6;
    let reach = explore("many_threads_reserve_cancel_fail_and_reap", |reach| {
        let held = Held::new(Capacity::Bounded(3), 2, 3);
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (held, reach) = (Arc::clone(&held), reach.clone());
                thread::spawn(move || {
                    for op in 0..OPS {
                        let fail = (t + op) % 5 == 0;
                        match (t + op) % 4 {
                            0 => {
                                let (r, slept) = block_on(waited(held.table.reserve()));
                                reach.hit_if(slept, "a waiter slept and was woken");
                                let r = held.hold(r.unwrap(), fail, &reach);
                                thread::yield_now();
                                held.give_back(r);
                            }
                            1 => match held.table.try_reserve() {
                                Ok(r) => {
                                    let r = held.hold(r, fail, &reach);
                                    held.give_back(r);
                                }
                                Err(e) => {
                                    assert_eq!(e, TryAcquireError::NoCapacity);
                                    reach.hit("a try found the table full");
                                }
                            },
                            2 => {
                                let mut fut = pin!(held.table.reserve());
                                match poll_once(fut.as_mut()) {
                                    Poll::Ready(r) => {
                                        let r = held.hold(r.unwrap(), fail, &reach);
                                        held.give_back(r);
                                    }
                                    Poll::Pending => {
                                        thread::yield_now();
                                        reach.hit("a queued waiter was cancelled");
                                    }
                                }
                            }
                            _ => {
                                let first = block_on(held.table.reserve()).unwrap();
                                let first = held.hold(first, fail, &reach);
                                let second = held.table.try_reserve().ok();
                                let second = second.map(|s| held.hold(s, false, &reach));
                                held.give_back(first);
                                if let Some(second) = second {
                                    held.give_back(second);
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        let reaper = spawn_reaper(&held, reach, 8);
        for worker in workers {
            worker.join().unwrap();
        }
        reaper.join().unwrap();
        held.assert_settled();
    });
    reach.explored(2).reached_all(&[
        "a waiter slept and was woken",
        "a try found the table full",
        "a queued waiter was cancelled",
        "a spin-up failed and drained its slot",
        "the reaper retired a slot",
    ]);
}

/// An unbounded table of depth one grows while four threads each hold twenty units at once
/// (they meet at a barrier holding them: more than its first segment of 64 slots carries) and
/// a reaper retires idle slots: no slot is handed to two holders, the table grows by exactly
/// one segment, and no live slot moves.
#[test]
fn unbounded_table_grows_while_reserved_and_reaped() {
    const THREADS: usize = 4;
    const EACH: usize = 20;
    let reach = explore("unbounded_table_grows_while_reserved_and_reaped", |reach| {
        let held = Held::new(Capacity::Unbounded, 1, 256);
        let first = held.table.stats().slots;
        assert!(THREADS * EACH > first);
        let all_held = Arc::new(shuttle::sync::Barrier::new(THREADS));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (held, reach) = (Arc::clone(&held), reach.clone());
                let all_held = Arc::clone(&all_held);
                thread::spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..EACH {
                        let r = held.table.try_reserve().expect("an unbounded table grows");
                        mine.push(held.hold(r, false, &reach));
                    }
                    all_held.wait();
                    for r in &mine {
                        assert!(held.table.is_current(r), "a live slot moved");
                    }
                    for r in mine {
                        held.give_back(r);
                    }
                })
            })
            .collect();
        let reaper = spawn_reaper(&held, reach, 4);
        for worker in workers {
            worker.join().unwrap();
        }
        reaper.join().unwrap();
        let slots = held.table.stats().slots;
        assert_eq!(slots, 2 * first, "grew by other than one segment");
        reach.hit("the table grew");
        held.assert_settled();
    });
    reach
        .explored(2)
        .reached_all(&["the table grew", "the reaper retired a slot"]);
}

/// Eight tasks contend for two permits of a limiter, some polling once and giving up (with a
/// permit perhaps handed to them meanwhile), some moving an owned permit to another thread:
/// never more than two out, and every permit back at the end.
#[test]
fn limit_waiters_handed_permits_and_cancelled() {
    const TASKS: usize = 8;
    let reach = explore("limit_waiters_handed_permits_and_cancelled", |reach| {
        let limit = Arc::new(Limit::new(2).unwrap());
        let out = Arc::new(AtomicU32::new(0));
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (limit, out, reach) = (Arc::clone(&limit), Arc::clone(&out), reach.clone());
                thread::spawn(move || {
                    let enter = || assert!(out.fetch_add(1, Ordering::SeqCst) < 2, "overshoot");
                    let leave = || {
                        out.fetch_sub(1, Ordering::SeqCst);
                    };
                    for round in 0..3 {
                        match (t + round) % 3 {
                            0 => {
                                let (permit, slept) = block_on(waited(limit.acquire()));
                                reach.hit_if(slept, "a waiter slept and was handed a permit");
                                enter();
                                thread::yield_now();
                                leave();
                                drop(permit);
                            }
                            1 => {
                                let mut acquire = pin!(limit.acquire());
                                match poll_once(acquire.as_mut()) {
                                    Poll::Ready(permit) => {
                                        enter();
                                        leave();
                                        drop(permit);
                                    }
                                    Poll::Pending => {
                                        thread::yield_now();
                                        reach.hit("a queued waiter was cancelled");
                                    }
                                }
                            }
                            _ => {
                                let permit =
                                    block_on(Limit::acquire_owned(Arc::clone(&limit))).unwrap();
                                enter();
                                let out = Arc::clone(&out);
                                thread::spawn(move || {
                                    out.fetch_sub(1, Ordering::SeqCst);
                                    drop(permit);
                                })
                                .join()
                                .unwrap();
                            }
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.join().unwrap();
        }
        assert_eq!((limit.available(), limit.waiting()), (2, 0));
    });
    reach.explored(2).reached_all(&[
        "a waiter slept and was handed a permit",
        "a queued waiter was cancelled",
    ]);
}
