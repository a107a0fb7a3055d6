//! Differential driver: the slot table plus its gate against a sequential model.
//!
//! The input chooses a table (bounded 1-6 slots, bounded 130 slots (three bitmap words, so the
//! room summary is in play), or unbounded; per-slot cap 1-4) and then a sequence of
//! operations: try_reserve, release (checked, or `release_held` of a held unit; current or
//! stale), mark ready, drain, start / poll / cancel one waiting reservation, advance the clock,
//! reap. After every operation the real table's answer and its `stats()` must equal the
//! model's, its hints must be settled (no capacity hidden, the summary agreeing), and a waiter
//! that is pending while the model has capacity must have been woken (no lost wake-up).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use slotpool::slots::{Capacity, Phase, Reservation, Reserve, SlotTable};
use slotpool::TryAcquireError;

use crate::bytes::Bytes;

/// The wide table's slots: three bitmap words, the first segment whole (its first word is
/// kept full, see [`run`]).
const WIDE: usize = 130;

/// The model of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ModelSlot {
    phase: Phase,
    load: u32,
    generation: u32,
    used: bool,
    idle_since: u64,
}

impl ModelSlot {
    const EMPTY: ModelSlot = ModelSlot {
        phase: Phase::Empty,
        load: 0,
        generation: 0,
        used: false,
        idle_since: 0,
    };

    fn retire(&mut self) {
        *self = ModelSlot {
            generation: (self.generation + 1) & ((1 << 29) - 1),
            ..ModelSlot::EMPTY
        };
    }
}

/// The sequential specification.
struct Model {
    slots: Vec<ModelSlot>,
    max_load: u32,
    unbounded: bool,
}

impl Model {
    /// Where the next reservation must go: lowest slot with room, else lowest Empty slot,
    /// else (unbounded) the first slot of a new segment as large as the table.
    fn next(&self) -> Option<(usize, bool)> {
        if let Some(i) = self.slots.iter().position(|s| {
            matches!(s.phase, Phase::Starting | Phase::Ready) && s.load < self.max_load
        }) {
            return Some((i, false));
        }
        if let Some(i) = self.slots.iter().position(|s| s.phase == Phase::Empty) {
            return Some((i, true));
        }
        self.unbounded.then_some((self.slots.len(), true))
    }

    fn reserve(&mut self) -> Option<(usize, bool, u32)> {
        let (index, claimed) = self.next()?;
        if index == self.slots.len() {
            let grow = self.slots.len();
            self.slots
                .extend(std::iter::repeat_n(ModelSlot::EMPTY, grow));
        }
        let slot = &mut self.slots[index];
        if claimed {
            slot.phase = Phase::Starting;
        }
        slot.load += 1;
        slot.used = true;
        Some((index, claimed, slot.generation))
    }

    fn release(&mut self, index: usize, generation: u32) -> bool {
        let slot = &mut self.slots[index];
        if slot.generation != generation || slot.load == 0 {
            return false;
        }
        slot.load -= 1;
        if slot.phase == Phase::Draining && slot.load == 0 {
            slot.retire();
        }
        true
    }

    /// A release: handed straight to a queued waiter when the slot still takes
    /// reservations (the load stays), else freed.
    fn release_or_hand(
        &mut self,
        r: Reservation,
        waiter_queued: bool,
        handed: &mut Option<(usize, u32)>,
    ) -> bool {
        let (index, generation) = (r.index(), r.generation().get());
        let slot = self.slots[index];
        if waiter_queued
            && slot.generation == generation
            && slot.load > 0
            && matches!(slot.phase, Phase::Starting | Phase::Ready)
        {
            *handed = Some((index, generation));
            return true;
        }
        self.release(index, generation)
    }

    fn drain(&mut self, index: usize, generation: u32) -> Option<Phase> {
        let slot = &mut self.slots[index];
        if slot.generation != generation || !matches!(slot.phase, Phase::Starting | Phase::Ready) {
            return None;
        }
        let was = slot.phase;
        slot.phase = Phase::Draining;
        if slot.load == 0 {
            slot.retire();
        }
        Some(was)
    }

    fn reap(&mut self, now: u64, timeout: u64) -> Vec<usize> {
        let mut retired = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.phase != Phase::Ready || slot.load != 0 {
                continue;
            }
            if slot.used {
                slot.used = false;
                slot.idle_since = now;
            } else if now.saturating_sub(slot.idle_since) >= timeout {
                slot.retire();
                retired.push(i);
            }
        }
        retired
    }
}

#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Runs one fuzz input. Panics on any divergence from the model.
pub fn run(data: &[u8]) {
    let mut input = Bytes::new(data);
    let max_load = 1 + input.below(4) as u32;
    let (capacity, unbounded, slots) = match input.below(8) {
        6 => (Capacity::Unbounded, true, 64),
        7 => (Capacity::Bounded(WIDE), false, WIDE),
        shape => (Capacity::Bounded(shape + 1), false, shape + 1),
    };
    let table = SlotTable::<()>::new(capacity, max_load).expect("valid configuration");
    let mut model = Model {
        slots: vec![ModelSlot::EMPTY; slots],
        max_load,
        unbounded,
    };
    let timeout = 10;
    let mut now = 0u64;
    let mut held: Vec<Reservation> = Vec::new();
    // The wide table's first bitmap word is kept full for the whole run, so that every
    // reservation scans past it: through the room summary on the fast path.
    let mut pinned: Vec<Reservation> = Vec::new();
    if slots == WIDE {
        for _ in 0..64 * max_load {
            let r = table.try_reserve().expect("an empty table has room");
            let expected = model.reserve().expect("an empty model has room");
            assert_eq!((r.index(), r.claimed(), r.generation().get()), expected);
            pinned.push(r);
        }
    }
    let mut stale: Vec<Reservation> = Vec::new();
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(Arc::clone(&flag));
    let mut waiter: Option<Pin<Box<Reserve<'_, ()>>>> = None;
    // A unit a release handed straight to the queued waiter (FIFO handoff).
    let mut handed: Option<(usize, u32)> = None;
    let mut steps = 0;

    while !input.is_empty() && steps < 512 {
        steps += 1;
        match input.below(10) {
            0 | 1 => {
                let real = table.try_reserve();
                match model.reserve() {
                    Some((index, claimed, generation)) => {
                        let r = real.expect("model has capacity, table said none");
                        assert_eq!(
                            (r.index(), r.claimed(), r.generation().get()),
                            (index, claimed, generation)
                        );
                        held.push(r);
                    }
                    None => assert_eq!(real, Err(TryAcquireError::NoCapacity)),
                }
            }
            2 | 3 if !held.is_empty() => {
                let r = held.swap_remove(input.below(held.len()));
                let queued = waiter.is_some() && handed.is_none() && table.stats().waiting == 1;
                let expected = model.release_or_hand(r, queued, &mut handed);
                if input.below(2) == 0 {
                    assert_eq!(table.release(r), expected);
                } else {
                    // A unit in `held` is held: a slot with load never retires.
                    assert!(expected, "a held unit the model calls stale");
                    table.release_held(r);
                }
                if !expected {
                    stale.push(r);
                }
            }
            4 if !stale.is_empty() => {
                let r = stale[input.below(stale.len())];
                let queued = waiter.is_some() && handed.is_none() && table.stats().waiting == 1;
                let expected = model.release_or_hand(r, queued, &mut handed);
                assert_eq!(table.release(r), expected);
            }
            5 if !held.is_empty() => {
                let r = held[input.below(held.len())];
                let slot = model.slots[r.index()];
                let expected =
                    slot.generation == r.generation().get() && slot.phase == Phase::Starting;
                if expected {
                    model.slots[r.index()].phase = Phase::Ready;
                }
                assert_eq!(table.mark_ready(r.index(), r.generation()), expected);
            }
            6 if !held.is_empty() => {
                let r = held[input.below(held.len())];
                let expected = model.drain(r.index(), r.generation().get());
                assert_eq!(table.begin_drain(r.index(), r.generation()), expected);
            }
            7 => {
                let mut fut = match waiter.take() {
                    Some(fut) => fut,
                    None => Box::pin(table.reserve()),
                };
                match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
                    Poll::Ready(result) => {
                        let r = result.expect("table not closed");
                        let (index, claimed, generation) = match handed.take() {
                            Some((index, generation)) => (index, false, generation),
                            None => model
                                .reserve()
                                .expect("table gave capacity the model lacks"),
                        };
                        assert_eq!(
                            (r.index(), r.claimed(), r.generation().get()),
                            (index, claimed, generation)
                        );
                        held.push(r);
                    }
                    Poll::Pending => {
                        assert!(
                            model.next().is_none(),
                            "waiter pending while capacity exists"
                        );
                        flag.0.store(false, Ordering::SeqCst);
                        waiter = Some(fut);
                    }
                }
            }
            8 => {
                // The waiter's deadline passes: its future is dropped, giving back a unit
                // that was handed to it.
                waiter = None;
                if let Some((index, generation)) = handed.take() {
                    assert!(model.release(index, generation));
                }
            }
            _ => {
                now += input.below(8) as u64;
                let mut retired = Vec::new();
                table.reap_idle(now, timeout, |r, ()| retired.push(r.index));
                assert_eq!(retired, model.reap(now, timeout));
            }
        }
        check(&table, &model, waiter.is_some());
        if waiter.is_some() && model.next().is_some() {
            assert!(
                flag.0.load(Ordering::SeqCst),
                "a waiter sleeps while capacity exists"
            );
        }
    }
    drop(waiter);
    if let Some((index, generation)) = handed.take() {
        assert!(model.release(index, generation));
    }
    for r in held.into_iter().chain(pinned) {
        assert!(model.release(r.index(), r.generation().get()));
        table.release_held(r);
    }
    check(&table, &model, false);
}

fn check(table: &SlotTable<()>, model: &Model, waiting: bool) {
    assert!(
        table.hints_settled(),
        "a hint hides capacity or the summary lost a word"
    );
    let stats = table.stats();
    let count = |p: Phase| model.slots.iter().filter(|s| s.phase == p).count();
    assert_eq!(stats.slots, model.slots.len());
    assert_eq!(stats.empty, count(Phase::Empty));
    assert_eq!(stats.starting, count(Phase::Starting));
    assert_eq!(stats.ready, count(Phase::Ready));
    assert_eq!(stats.draining, count(Phase::Draining));
    assert_eq!(
        stats.in_flight,
        model.slots.iter().map(|s| u64::from(s.load)).sum::<u64>()
    );
    if !waiting {
        assert_eq!(stats.waiting, 0, "a dropped waiter left the queue");
    }
    for (i, slot) in model.slots.iter().enumerate() {
        let word = table.word(i).expect("slot exists");
        assert_eq!(
            (
                word.phase(),
                word.load(),
                word.generation().get(),
                word.used()
            ),
            (slot.phase, slot.load, slot.generation, slot.used),
            "slot {i}"
        );
    }
}
