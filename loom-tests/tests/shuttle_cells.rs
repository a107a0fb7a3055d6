//! Shuttle tests of the exclusive and shared cells (the protocols under `ClientPool` and
//! `ChannelPool`) with reapers, at a scale loom cannot enumerate: several threads check
//! values out and in, build, discard and abandon them, while a reaper pass runs again and
//! again on a moving clock, and the pool closes at the end.
//!
//! A shadow registry, updated under a plain lock in one step with each check, records which
//! values are held and which were reaped: a value handed to two holders, a reaped value handed
//! out, or a held value reaped fails the test whichever of the two racing parties records
//! second; at the end every value built is accounted for exactly once.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_shuttle" cargo test --release -p slotpool-loom-tests
//! --target-dir target/shuttle --test shuttle_cells` (the budget: see the crate docs).
#![cfg(slotpool_shuttle)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use shuttle::future::block_on;
use shuttle::thread;
use slotpool::__internal::exclusive::{Checkout, ExclusiveSlots};
use slotpool::__internal::shared::{Joined, SharedSlots};
use slotpool::__internal::slots::Capacity;
use slotpool_loom_tests::{explore, waited};

/// What the test knows about every value (a client, a channel) it built.
#[derive(Default)]
struct Registry {
    /// Holders of each value now.
    holders: HashMap<u32, u32>,
    /// Values reaped (or discarded) for good.
    gone: HashSet<u32>,
    /// Values built.
    built: HashSet<u32>,
}

struct Shadow {
    registry: Mutex<Registry>,
    next_value: AtomicU32,
    /// The clock the reaper moves and holders stamp their returns with.
    now: AtomicU64,
}

impl Shadow {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            registry: Mutex::default(),
            next_value: AtomicU32::new(1),
            now: AtomicU64::new(0),
        })
    }

    fn build(&self) -> u32 {
        let value = self.next_value.fetch_add(1, Ordering::Relaxed);
        let mut registry = self.registry.lock().unwrap();
        registry.built.insert(value);
        *registry.holders.entry(value).or_default() += 1;
        value
    }

    /// A holder got `value`: it must not be gone, and (with `exclusive`) not held already.
    fn got(&self, value: u32, exclusive: bool) {
        let mut registry = self.registry.lock().unwrap();
        assert!(
            !registry.gone.contains(&value),
            "a reaped value {value} was handed out"
        );
        let holders = registry.holders.entry(value).or_default();
        assert!(
            !exclusive || *holders == 0,
            "value {value} handed to two holders"
        );
        *holders += 1;
    }

    fn put_back(&self, value: u32) {
        let mut registry = self.registry.lock().unwrap();
        let holders = registry.holders.get_mut(&value).expect("held");
        *holders -= 1;
    }

    /// `value` left for good (reaped, discarded): nobody may hold it, and only once.
    fn gone(&self, value: u32, by_holder: bool) {
        let mut registry = self.registry.lock().unwrap();
        let holders = registry.holders.get(&value).copied().unwrap_or(0);
        assert_eq!(
            holders,
            u32::from(by_holder),
            "value {value} reaped while held"
        );
        assert!(registry.gone.insert(value), "value {value} reaped twice");
        if by_holder {
            registry.holders.insert(value, 0);
        }
    }

    fn stamp(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }

    /// Every value built is gone exactly once, and nobody holds anything.
    fn assert_all_gone(&self) {
        let registry = self.registry.lock().unwrap();
        assert_eq!(registry.gone, registry.built, "a value was lost");
        assert!(registry.holders.values().all(|h| *h == 0));
    }
}

/// Runs `worker(t)` on `threads` threads while another moves the shadow clock through six
/// ticks and runs `reap(tick)` at each, and joins them all.
fn run_with_reaper(
    shadow: &Arc<Shadow>,
    threads: usize,
    worker: impl Fn(usize) + Send + Sync + 'static,
    reap: impl Fn(u64) + Send + 'static,
) {
    let worker = Arc::new(worker);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let worker = Arc::clone(&worker);
            thread::spawn(move || worker(t))
        })
        .collect();
    let reaper = {
        let shadow = Arc::clone(shadow);
        thread::spawn(move || {
            for tick in 1..=6 {
                shadow.now.store(tick, Ordering::Relaxed);
                reap(tick);
                thread::yield_now();
            }
        })
    };
    for worker in workers {
        worker.join().unwrap();
    }
    reaper.join().unwrap();
}

/// Four threads on an exclusive table of two slots: each checks out (waiting when both are
/// taken), and returns the value, or discards it, or fails to build one, while a reaper takes
/// values idle since an earlier tick. No value is ever held twice or handed out after a reap;
/// after a close and a closing pass every value built is accounted for.
#[test]
fn exclusive_cells_with_a_reaper() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 4;
    let reach = explore("exclusive_cells_with_a_reaper", |reach| {
        let slots = Arc::new(ExclusiveSlots::<u32>::new(Capacity::Bounded(2)).unwrap());
        let shadow = Shadow::new();
        let worker = {
            let (slots, shadow, reach) = (Arc::clone(&slots), Arc::clone(&shadow), reach.clone());
            move |t: usize| {
                for round in 0..ROUNDS {
                    let (checkout, slept) = block_on(waited(slots.checkout()));
                    reach.hit_if(slept, "a caller waited for a client");
                    let (lease, value) = match checkout.unwrap() {
                        Checkout::Idle { lease, value } => {
                            shadow.got(value, true);
                            reach.hit("an idle client was reused");
                            (lease, value)
                        }
                        Checkout::Vacant { lease } => {
                            if (t + round) % 5 == 4 {
                                // The build failed: the slot goes back empty.
                                slots.retire(lease);
                                continue;
                            }
                            let value = shadow.build();
                            slots.occupy(&lease);
                            (lease, value)
                        }
                    };
                    thread::yield_now();
                    if (t + round) % 7 == 6 {
                        // The client broke: discard it.
                        shadow.gone(value, true);
                        slots.retire(lease);
                        continue;
                    }
                    shadow.put_back(value);
                    assert!(slots.check_in(lease, value, shadow.stamp()).is_kept());
                }
            }
        };
        let reap = {
            let (slots, shadow, reach) = (Arc::clone(&slots), Arc::clone(&shadow), reach.clone());
            move |tick: u64| {
                for (value, _stamp) in slots.reap(|stamp| stamp < tick) {
                    shadow.gone(value, false);
                    reach.hit("the reaper took an idle client");
                }
            }
        };
        run_with_reaper(&shadow, THREADS, worker, reap);
        slots.close();
        for (value, _) in slots.reap(|_| true) {
            shadow.gone(value, false);
        }
        shadow.assert_all_gone();
        let counts = slots.counts();
        assert_eq!((counts.live, counts.table.in_flight), (0, 0), "{counts:?}");
    });
    reach.explored(2).reached_all(&[
        "a caller waited for a client",
        "an idle client was reused",
        "the reaper took an idle client",
    ]);
}

/// Four threads on a shared table of depth two: each joins (opening a channel when it claims
/// a slot, or abandoning the claim), holds across a yield and leaves, while a reaper retires
/// channels idle since an earlier tick. A held channel is never reaped and a reaped one never
/// joined; at the end every channel opened is reaped exactly once.
#[test]
fn shared_cells_with_a_reaper() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 4;
    let reach = explore("shared_cells_with_a_reaper", |reach| {
        let slots = Arc::new(SharedSlots::<u32>::new(2).unwrap());
        let shadow = Shadow::new();
        let worker = {
            let (slots, shadow, reach) = (Arc::clone(&slots), Arc::clone(&shadow), reach.clone());
            move |t: usize| {
                for round in 0..ROUNDS {
                    let share = match slots.join() {
                        Joined::Shared(share) => {
                            shadow.got(*share.value(), false);
                            reach.hit("joined an open channel");
                            share
                        }
                        Joined::Vacant(lease) => {
                            if (t + round) % 5 == 4 {
                                slots.abandon(lease);
                                continue;
                            }
                            let value = shadow.build();
                            slots.open(lease, value)
                        }
                    };
                    thread::yield_now();
                    shadow.put_back(*share.value());
                    slots.leave(share, shadow.stamp());
                }
            }
        };
        let reap = {
            let (slots, shadow, reach) = (Arc::clone(&slots), Arc::clone(&shadow), reach.clone());
            move |tick: u64| {
                for (_index, incarnation) in slots.reap(|stamp| stamp < tick) {
                    shadow.gone(*incarnation.value(), false);
                    reach.hit("the reaper retired an idle channel");
                }
            }
        };
        run_with_reaper(&shadow, THREADS, worker, reap);
        for (_index, incarnation) in slots.reap(|_| true) {
            shadow.gone(*incarnation.value(), false);
        }
        shadow.assert_all_gone();
        let counts = slots.counts();
        assert_eq!((counts.open, counts.holders), (0, 0), "{counts:?}");
        assert_eq!(counts.table.in_flight, 0);
    });
    reach.explored(2).reached_all(&[
        "joined an open channel",
        "the reaper retired an idle channel",
    ]);
}
