//! Differential driver: the slot table plus its gate against a sequential model.
//!
//! The input chooses a table (bounded 1-6 slots, bounded 130 slots (three bitmap words, so the
//! room summary is in play), or unbounded; per-slot cap 1-4) and then a sequence of
//! operations: try_reserve, release (checked, or `release_held` of a held unit), a stale
//! release, mark ready, drain (of a held incarnation, an idle one, or one already gone),
//! start / poll / cancel one waiting reservation, advance the clock, reap. After every
//! operation the real table's answer and its `stats()` must equal the model's, its hints must
//! be settled (no capacity hidden, the summary agreeing), and a waiter that is pending while
//! the model has capacity must have been woken (no lost wake-up).
//!
//! A stale release replays a reservation that was released (or refused) before and whose
//! slot has since been retired (drained to Empty, or reaped) and perhaps claimed again: the
//! model refuses it by generation, and so must the table, changing nothing. Every reservation
//! a release hands back is kept for that, so the generation checks are fuzzed as soon as a
//! sequence retires a slot.
//!
//! [`Model`] is the sequential specification of the table, shared with the linearizability
//! check of the stream pool (`core/tests/lin_stream.rs`), which includes this file.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use slotpool::__internal::slots::{Capacity, Phase, Reservation, Reserve, SlotTable};
use slotpool::TryAcquireError;

use crate::bytes::Bytes;

/// The wide table's slots: three bitmap words, the first segment whole (its first word is
/// kept full, see [`run`]).
const WIDE: usize = 130;

/// The model of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelSlot {
    /// Where the slot is in its lifecycle.
    pub phase: Phase,
    /// Units reserved.
    pub load: u32,
    /// The incarnation (29 bits, wrapping).
    pub generation: u32,
    /// Reserved since the last reaper pass that found it idle.
    pub used: bool,
    /// When a reaper pass last found it idle with `used` set.
    pub idle_since: u64,
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

/// The sequential specification of a slot table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Model {
    /// Every allocated slot, by index.
    pub slots: Vec<ModelSlot>,
    /// Per-slot cap on load.
    pub max_load: u32,
    /// Grows by a segment as large as the table when nothing has room or is vacant.
    pub unbounded: bool,
}

impl Model {
    /// A table of `slots` Empty slots (an unbounded one starts with its first segment).
    pub fn new(slots: usize, max_load: u32, unbounded: bool) -> Self {
        Self {
            slots: vec![ModelSlot::EMPTY; slots],
            max_load,
            unbounded,
        }
    }

    /// Whether slot `index` takes a join: live (Starting or Ready) and below `max_load`.
    pub fn has_room(&self, index: usize) -> bool {
        let slot = &self.slots[index];
        matches!(slot.phase, Phase::Starting | Phase::Ready) && slot.load < self.max_load
    }

    /// Where the next reservation must go: lowest slot with room, else lowest Empty slot,
    /// else (unbounded) the first slot of a new segment as large as the table.
    pub fn next(&self) -> Option<(usize, bool)> {
        if let Some(i) = (0..self.slots.len()).find(|&i| self.has_room(i)) {
            return Some((i, false));
        }
        if let Some(i) = self.slots.iter().position(|s| s.phase == Phase::Empty) {
            return Some((i, true));
        }
        self.unbounded.then_some((self.slots.len(), true))
    }

    /// Takes one unit where [`Model::next`] says: `(index, claimed, generation)`.
    pub fn reserve(&mut self) -> Option<(usize, bool, u32)> {
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

    /// Gives one unit back; refused (`false`, nothing changes) for another incarnation or a
    /// slot without load. The last unit of a Draining slot retires it.
    pub fn release(&mut self, index: usize, generation: u32) -> bool {
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

    /// Starting → Ready for that incarnation.
    pub fn mark_ready(&mut self, index: usize, generation: u32) -> bool {
        let slot = &mut self.slots[index];
        if slot.generation != generation || slot.phase != Phase::Starting {
            return false;
        }
        slot.phase = Phase::Ready;
        true
    }

    /// Whether a reservation of `generation` on slot `index` belongs to an incarnation that has
    /// ended (the slot was retired since).
    pub fn is_stale(&self, index: usize, generation: u32) -> bool {
        self.slots
            .get(index)
            .is_some_and(|slot| slot.generation != generation)
    }

    /// Starting/Ready → Draining for that incarnation (Empty at once without load).
    pub fn drain(&mut self, index: usize, generation: u32) -> Option<Phase> {
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

    /// One reaper pass at `now`: the indices retired.
    pub fn reap(&mut self, now: u64, timeout: u64) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.reap_slot(i, now, timeout))
            .collect()
    }

    /// A reaper pass's step on slot `index` (a pass is one step per slot, in index order):
    /// an idle Ready slot used since the last pass starts its idle time now; one idle for
    /// `timeout` is retired (true).
    pub fn reap_slot(&mut self, index: usize, now: u64, timeout: u64) -> bool {
        let slot = &mut self.slots[index];
        if slot.phase != Phase::Ready || slot.load != 0 {
            return false;
        }
        if slot.used {
            slot.used = false;
            slot.idle_since = now;
            false
        } else if now.saturating_sub(slot.idle_since) >= timeout {
            slot.retire();
            true
        } else {
            false
        }
    }
}

#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Reservations kept for stale releases (the most recent ones).
const SPENT: usize = 16;

/// What one run exercised, so the replays can show they reach the paths they are for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Operations run.
    pub ops: usize,
    /// Releases of a reservation whose slot had been retired since (refused by generation).
    pub stale_releases: usize,
    /// Of those, releases into a slot that a later incarnation holds again.
    pub stale_into_reuse: usize,
}

/// Runs one fuzz input. Panics on any divergence from the model.
pub fn run(data: &[u8]) -> Coverage {
    let mut input = Bytes::new(data);
    let max_load = 1 + input.below(4) as u32;
    let (capacity, unbounded, slots) = match input.below(8) {
        6 => (Capacity::Unbounded, true, 64),
        7 => (Capacity::Bounded(WIDE), false, WIDE),
        shape => (Capacity::Bounded(shape + 1), false, shape + 1),
    };
    let table = SlotTable::<()>::new(capacity, max_load).expect("valid configuration");
    let mut model = Model::new(slots, max_load, unbounded);
    let mut coverage = Coverage::default();
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
    // Reservations released (or refused) before: a release of one whose slot was retired
    // since is stale.
    let mut spent: Vec<Reservation> = Vec::new();
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(Arc::clone(&flag));
    let mut waiter: Option<Pin<Box<Reserve<'_, ()>>>> = None;
    // A unit a release handed straight to the queued waiter (FIFO handoff).
    let mut handed: Option<(usize, u32)> = None;
    let mut steps = 0;

    while !input.is_empty() && steps < 512 {
        steps += 1;
        coverage.ops += 1;
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
                if spent.len() == SPENT {
                    let _ = spent.remove(0);
                }
                spent.push(r);
            }
            4 if spent
                .iter()
                .any(|r| model.is_stale(r.index(), r.generation().get())) =>
            {
                let candidates: Vec<Reservation> = spent
                    .iter()
                    .copied()
                    .filter(|r| model.is_stale(r.index(), r.generation().get()))
                    .collect();
                let r = candidates[input.below(candidates.len())];
                let queued = waiter.is_some() && handed.is_none() && table.stats().waiting == 1;
                let reused = model.slots[r.index()].load > 0;
                let expected = model.release_or_hand(r, queued, &mut handed);
                assert_eq!(table.release(r), expected, "a stale release of {r:?}");
                coverage.stale_releases += 1;
                coverage.stale_into_reuse += usize::from(reused);
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
            6 if !held.is_empty() || !spent.is_empty() => {
                // Drain the incarnation of a held reservation, or of one released before (its
                // slot may have no load left, or have been retired since): the resource failed
                // or closed while busy, idle, or after it was gone.
                let pick = input.below(held.len() + spent.len());
                let r = held
                    .get(pick)
                    .copied()
                    .unwrap_or_else(|| spent[pick - held.len()]);
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
    coverage
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
