//! Loom models of a reaped slot's unit kept for its owner: `SlotTable::reap_idle_holding`
//! retires an idle slot to Draining with one unit, so that the resource counts until it is
//! closed, and `slots::Handover` passes that unit to whichever of the reaper and the owner
//! learns last of the retirement and the close.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --test handover --target-dir target/loom`.
#![cfg(slotpool_loom)]

use loom::future::block_on;
use loom::sync::atomic::{AtomicU8, Ordering};
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

/// The closing stream's resource, as a claimer of the slot's next incarnation finds it. Read
/// and written `Relaxed`: only the protocol's own synchronization (the slot's word, the
/// hand-over's word) orders the driver's close before the next claim.
const OPEN: u8 = 1;
const CLOSED: u8 = 2;
const REOPENED: u8 = 3;

/// The reaper, the stream's driver and a claimer, three parties: the reaper retires the idle
/// slot holding its unit and parks the unit in the hand-over; the driver closes the stream's
/// resource, drains the slot and lets go, releasing a parked unit; the claimer reserves room
/// on the table, waiting if there is none. However they interleave, the unit is released
/// exactly once (by the driver, or by the reaper when the driver had let go), the slot ends
/// Empty with no load, the claimer ends (it joined the stream before its close, or it claimed
/// the slot's next incarnation, woken if it had slept: a claimer left asleep is a deadlock,
/// which loom reports), it joins the old stream only if the reaper did not retire it, and a
/// claimer of the next incarnation
/// finds the old resource closed: the close happens before the claim, whichever party's
/// release let the claim in. The case that needs all three: the driver lets go before the
/// reaper parks, so the reaper's failed park must see the close (the driver's drain left the
/// reaped slot's word untouched) for the claim its release lets in to come after it; without
/// the claimer nothing reads the resource after the release, and without the reaper the
/// driver releases after its own close.
/// Reached: the driver released the parked unit, the reaper released it (the driver gone),
/// the claimer claimed a unit the reaper released, the claimer slept and was woken, and the
/// claimer joined the stream before its close.
#[test]
fn a_reaper_a_driver_and_a_claimer_release_once_and_claim_after_the_close() {
    let reach = model(|reach| {
        let (table, first) = idle_table();
        let table = Arc::new(table);
        let handover = Arc::new(Handover::new());
        let resource = Arc::new(AtomicU8::new(OPEN));
        let reaper = {
            let (table, handover) = (Arc::clone(&table), Arc::clone(&handover));
            thread::spawn(move || {
                let mut units = Vec::new();
                table.reap_idle_holding(1, 0, 0, |unit, _| units.push(unit));
                assert!(units.len() <= 1, "one slot reaped twice: {units:?}");
                let reaped = !units.is_empty();
                let released = units.into_iter().any(|unit| {
                    assert_eq!(unit.generation(), first.generation());
                    handover
                        .hold(unit)
                        .map(|back| assert!(table.release(back)))
                        .is_some()
                });
                (reaped, released)
            })
        };
        let claimer = {
            let (table, resource) = (Arc::clone(&table), Arc::clone(&resource));
            thread::spawn(move || {
                let (got, slept) = block_on(waited(table.reserve()));
                let got = got.unwrap();
                let claimed = got.claimed();
                if claimed {
                    assert_eq!(got.generation(), first.generation().next());
                    assert_eq!(
                        resource.load(Ordering::Relaxed),
                        CLOSED,
                        "claimed the slot before its resource was closed"
                    );
                    resource.store(REOPENED, Ordering::Relaxed);
                    table.begin_drain(got.index(), got.generation());
                } else {
                    // A request on the old stream: its driver fails it and releases the unit.
                    assert_eq!(got.generation(), first.generation());
                    assert!(!slept, "joined a stream it had to wait for");
                }
                assert!(table.release(got));
                (claimed, slept)
            })
        };
        // The driver: its halves dropped (the resource closed), it drains the slot, then lets
        // go, releasing a unit the reaper parked.
        resource.store(CLOSED, Ordering::Relaxed);
        table.begin_drain(first.index(), first.generation());
        let driver_released = handover
            .let_go()
            .map(|unit| assert!(table.release(unit)))
            .is_some();
        let (reaped, reaper_released) = reaper.join().unwrap();
        let (claimed, slept) = claimer.join().unwrap();
        assert_eq!(
            u8::from(driver_released) + u8::from(reaper_released),
            u8::from(reaped),
            "reaped: {reaped}, released by the driver: {driver_released}, by the reaper: \
             {reaper_released}"
        );
        assert!(
            claimed || !reaped,
            "the claimer joined a stream the reaper retired"
        );
        assert!(handover.is_let_go());
        assert_eq!(handover.let_go(), None);
        assert_eq!(
            resource.load(Ordering::Relaxed),
            if claimed { REOPENED } else { CLOSED }
        );
        let stats = table.stats();
        assert_eq!((stats.empty, stats.in_flight), (1, 0));
        reach.hit_if(driver_released, "the driver released the parked unit");
        reach.hit_if(reaper_released, "the reaper released, the driver gone");
        reach.hit_if(
            reaper_released && claimed,
            "the claimer claimed the unit the reaper released",
        );
        reach.hit_if(slept, "the claimer slept and was woken");
        reach.hit_if(!claimed, "the claimer joined the stream before its close");
    });
    reach.explored(2).reached_all(&[
        "the driver released the parked unit",
        "the reaper released, the driver gone",
        "the claimer claimed the unit the reaper released",
        "the claimer slept and was woken",
        "the claimer joined the stream before its close",
    ]);
}
