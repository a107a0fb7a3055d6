//! Loom models of a reaped slot's unit kept for its owner: `SlotTable::reap_idle_holding`
//! retires an idle slot to Draining with one unit, so that the resource counts until it is
//! closed, and `slots::Handover` passes that unit to whichever of the reaper and the owner
//! learns last of the retirement and the close.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --test handover --target-dir target/loom`.
#![cfg(slotpool_loom)]

use loom::future::block_on;
use loom::sync::Arc;
use loom::thread;
use slotpool::__internal::slots::Reservation;
use slotpool::__internal::slots::{Capacity, Handover, Phase, SlotTable};
use slotpool::TryAcquireError;
use slotpool_loom_tests::{model, waited};

/// A one-slot, one-unit table whose stream is open and idle, noted idle by a first pass.
fn idle_table() -> (SlotTable, Reservation) {
    let table = SlotTable::new(Capacity::Bounded(1), 1).unwrap();
    let first = table.try_reserve().unwrap();
    assert!(table.mark_ready(first.index(), first.generation()));
    assert!(table.release(first));
    table.reap_idle_holding(0, 0, 0, |_, _| panic!("not idle long enough yet"));
    (table, first)
}

/// The reaper's held retirement racing a reservation on the idle slot: either the
/// reservation joins the stream (the reaper's CAS fails), or the reaper retires it and the
/// reservation finds no room: the slot stays out of every claim while its resource closes
/// (a retirement straight to Empty let the reservation claim it, a second resource beside the
/// closing one). Once the unit is released the slot is Empty and the next claim takes the
/// next incarnation. Reached: both winners.
#[test]
fn held_reap_vs_reserve_never_claims_the_closing_slot() {
    let reach = model(|reach| {
        let (table, first) = idle_table();
        let table = Arc::new(table);
        let reserver = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve())
        };
        let mut units = Vec::new();
        table.reap_idle_holding(1, 0, 0, |unit, _| units.push(unit));
        let got = reserver.join().unwrap();
        let word = table.word(0).unwrap();
        match units.pop() {
            None => {
                reach.hit("the reservation won");
                let got = got.unwrap();
                assert!(!got.claimed());
                assert_eq!((word.phase(), word.load()), (Phase::Ready, 1));
                assert!(table.release(got));
            }
            Some(unit) => {
                reach.hit("the reaper won");
                assert_eq!(got, Err(TryAcquireError::NoCapacity));
                assert_eq!(unit.generation(), first.generation());
                assert_eq!((word.phase(), word.load()), (Phase::Draining, 1));
                assert!(table.release(unit));
                assert_eq!(table.word(0).unwrap().phase(), Phase::Empty);
                let next = table.try_reserve().unwrap();
                assert!(next.claimed());
                assert_eq!(next.generation(), first.generation().next());
                table.begin_drain(next.index(), next.generation());
                assert!(table.release(next));
            }
        }
        assert_eq!(table.stats().in_flight, 0);
    });
    reach
        .explored(2)
        .reached_all(&["the reservation won", "the reaper won"]);
}

/// The reaper parking its unit racing the owner letting go: exactly one of them gets the unit
/// and releases it, and the slot ends Empty. Reached: the owner releases (the reaper parked
/// first), and the reaper releases (the owner had let go).
#[test]
fn hold_vs_let_go_releases_once() {
    let reach = model(|reach| {
        let (table, _) = idle_table();
        let mut units = Vec::new();
        table.reap_idle_holding(1, 0, 0, |unit, _| units.push(unit));
        let unit = units.pop().expect("the pass retires the idle slot");
        let table = Arc::new(table);
        let handover = Arc::new(Handover::new());
        let reaper = {
            let (table, handover) = (Arc::clone(&table), Arc::clone(&handover));
            thread::spawn(move || {
                handover
                    .hold(unit)
                    .map(|back| assert!(table.release(back)))
                    .is_some()
            })
        };
        let owner_released = handover
            .let_go()
            .map(|unit| assert!(table.release(unit)))
            .is_some();
        let reaper_released = reaper.join().unwrap();
        assert!(
            owner_released != reaper_released,
            "released by the owner: {owner_released}, by the reaper: {reaper_released}"
        );
        reach.hit(if owner_released {
            "the owner released the parked unit"
        } else {
            "the reaper released, the owner gone"
        });
        assert!(handover.is_let_go());
        assert_eq!(handover.let_go(), None);
        let stats = table.stats();
        assert_eq!((stats.empty, stats.in_flight), (1, 0));
    });
    reach.explored(2).reached_all(&[
        "the owner released the parked unit",
        "the reaper released, the owner gone",
    ]);
}

/// A caller waiting for room on the table whose only slot the reaper holds: the owner's
/// release of the unit, once the resource is closed, empties the slot and wakes the caller,
/// who claims the next incarnation. Reached: the caller slept and was woken, and the release
/// came first.
#[test]
fn the_held_units_release_wakes_a_waiter() {
    let reach = model(|reach| {
        let (table, first) = idle_table();
        let mut units = Vec::new();
        table.reap_idle_holding(1, 0, 0, |unit, _| units.push(unit));
        let handover = Handover::new();
        assert_eq!(handover.hold(units.pop().unwrap()), None);
        let table = Arc::new(table);
        let waiter = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let (got, slept) = block_on(waited(table.reserve()));
                let got = got.unwrap();
                assert!(got.claimed(), "the closed slot's next incarnation");
                assert_eq!(got.generation(), first.generation().next());
                table.begin_drain(got.index(), got.generation());
                assert!(table.release(got));
                slept
            })
        };
        let unit = handover.let_go().expect("the parked unit");
        assert!(table.release(unit));
        let slept = waiter.join().unwrap();
        reach.hit(if slept {
            "the caller slept and the release woke it"
        } else {
            "the release came first"
        });
        assert_eq!(table.stats().in_flight, 0);
    });
    reach.explored(2).reached_all(&[
        "the caller slept and the release woke it",
        "the release came first",
    ]);
}
