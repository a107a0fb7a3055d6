#![cfg(slotpool_loom)]
//! Loom models of units that keep their table alive (`slotpool::__internal::slots`, "Units that keep
//! their table alive"; the stream pool's owned guards): the owner's drop parks its reference
//! with the orphan bit, the release that leaves no orphaned unit out takes it back, and the
//! release windows hold the free until every release that did not see the bit has left.
//!
//! Each model builds the pool state as the stream pool does: [`State`] holds the table and
//! its windows, and its `Drop` waits for the windows, as the pool's does, then marks the
//! table freed ([`SlotTable::bury`]). Every release of an owned unit reads that mark after its
//! last access, so a release that is not ordered before the free is a race loom reports; the
//! drop also asserts that no unit is out. The releasing threads reach the state through a
//! raw pointer only, as the guards do. Every model checks that the state was freed in the end.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --test orphan --target-dir target/loom`.

use loom::future::block_on;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use slotpool::__internal::slots::Windows;
use slotpool::__internal::slots::{Capacity, Reservation, SlotTable};
use slotpool_loom_tests::{model, waited};

/// The pool state: the table, its release windows, and what its drop checks.
struct State {
    table: SlotTable,
    windows: Windows,
    freed: Arc<AtomicBool>,
}

impl Drop for State {
    fn drop(&mut self) {
        // The pool state's drop: wait for the windows.
        self.windows.wait_closed();
        assert_eq!(
            self.table.stats().in_flight,
            0,
            "the state was freed while a unit was out"
        );
        self.table.bury();
        self.freed.store(true, Ordering::SeqCst);
    }
}

/// A pointer to the state, as an owned guard holds it.
#[derive(Clone, Copy)]
struct Raw(*const State);

// SAFETY: the state is `Sync`; the models only follow the pointer while a unit keeps it
// alive, as the guards do.
unsafe impl Send for Raw {}

/// A state over `slots` slots of depth `depth`, with `units` units reserved (one per slot
/// while there are slots), and the flag its drop sets.
fn state(
    slots: usize,
    depth: u32,
    units: usize,
) -> (Arc<State>, Vec<Reservation>, Arc<AtomicBool>) {
    let freed = Arc::new(AtomicBool::new(false));
    let state = Arc::new(State {
        table: SlotTable::new(Capacity::Bounded(slots), depth).unwrap(),
        windows: Windows::new(),
        freed: Arc::clone(&freed),
    });
    let units = (0..units)
        .map(|_| state.table.try_reserve().expect("room for every unit"))
        .collect();
    (state, units, freed)
}

/// An owned guard's drop: the release inside window `window`, then the reference it freed, if
/// any. Returns whether it freed one.
fn owned_release(state: Raw, window: usize, unit: Reservation) -> bool {
    let state = state.0;
    // SAFETY: the unit keeps the state alive until the window closes (what the models check).
    let keep = unsafe {
        Windows::release_owned(
            &raw const (*state).windows,
            window,
            &raw const (*state).table,
            unit,
        )
    };
    let freed_one = keep.is_some();
    drop(keep);
    freed_one
}

fn owned_release_on_a_thread(
    state: Raw,
    window: usize,
    unit: Reservation,
) -> thread::JoinHandle<bool> {
    thread::spawn(move || owned_release(state, window, unit))
}

/// The pool handle's drop: close, then let go (the reference parked if a unit is out).
/// Returns whether the handle's own drop freed... whether it got its reference back.
fn owner_lets_go(state: Arc<State>) -> bool {
    let table: *const SlotTable = &state.table;
    // SAFETY: `state` is alive until `orphan` parks it, and parked until it returns.
    unsafe { &*table }.close();
    // SAFETY: as above.
    let back = unsafe { &*table }.orphan(Box::new(state));
    let got_back = back.is_some();
    drop(back);
    got_back
}

/// An owned release racing the owner's drop. Whether the release's RMW came first (the owner
/// finds no unit out and frees the state, after waiting for the release's window) or the
/// owner's flag did (the release finds the bit and frees the state itself), the state is
/// freed once, after the release's last access.
#[test]
fn an_owned_release_racing_the_owners_drop() {
    let reach = model(|reach| {
        let (state, units, freed) = state(1, 2, 1);
        let raw = Raw(Arc::as_ptr(&state));
        let releaser = owned_release_on_a_thread(raw, 0, units[0]);
        let owner_freed = owner_lets_go(state);
        let release_freed = releaser.join().unwrap();
        assert!(freed.load(Ordering::SeqCst), "the state was not freed");
        assert!(
            owner_freed != release_freed,
            "one reference, freed once: owner {owner_freed}, release {release_freed}"
        );
        reach.hit(if owner_freed {
            "the owner found no unit out"
        } else {
            "the release found the bit and freed the state"
        });
    });
    reach.explored(2).reached_all(&[
        "the owner found no unit out",
        "the release found the bit and freed the state",
    ]);
}

/// Two owned units on two slots, released on two threads while the owner lets go: whichever
/// of the three moves last frees the state, after both releases left it. A release that
/// reads the other's slot before the owner flagged it must not take the reference back (the
/// parking lock keeps its reads after the owner's pass).
#[test]
fn two_owned_releases_racing_the_owners_drop() {
    let reach = model(|reach| {
        let (state, units, freed) = state(2, 1, 2);
        let raw = Raw(Arc::as_ptr(&state));
        let first = owned_release_on_a_thread(raw, 0, units[0]);
        let second = owned_release_on_a_thread(raw, 1, units[1]);
        let owner = owner_lets_go(state);
        let (first, second) = (first.join().unwrap(), second.join().unwrap());
        assert!(freed.load(Ordering::SeqCst), "the state was not freed");
        assert_eq!(
            [owner, first, second].iter().filter(|&&f| f).count(),
            1,
            "one reference, freed once: owner {owner}, releases {first} {second}"
        );
        reach.hit(match (owner, first) {
            (true, _) => "the owner freed it",
            (_, true) => "the first release freed it",
            _ => "the second release freed it",
        });
    });
    reach.explored(2).reached_all(&[
        "the owner freed it",
        "the first release freed it",
        "the second release freed it",
    ]);
}

/// The owner lets go with two units out on one slot; both come back on two threads. Each
/// sees the bit; the one that leaves the slot empty frees the state, and the other is out of
/// the table by then.
#[test]
fn the_last_of_two_orphaned_units_frees_the_state() {
    let reach = model(|reach| {
        let (state, units, freed) = state(1, 2, 2);
        let raw = Raw(Arc::as_ptr(&state));
        assert!(
            !owner_lets_go(state),
            "units are out: the reference is parked"
        );
        let first = owned_release_on_a_thread(raw, 0, units[0]);
        let second = owned_release(raw, 1, units[1]);
        let first = first.join().unwrap();
        assert!(freed.load(Ordering::SeqCst), "the state was not freed");
        assert!(first != second, "freed once: {first} {second}");
        reach.hit(if first {
            "the thread's release was last"
        } else {
            "the main thread's release was last"
        });
    });
    reach.explored(2).reached_all(&[
        "the thread's release was last",
        "the main thread's release was last",
    ]);
}

/// A Draining slot's last unit, released after the owner let go: the release retires the
/// slot (the orphan bit survives the retire) and frees the state, after the retire's last
/// access; a unit on another slot released at the same time may free it instead.
#[test]
fn an_orphaned_release_that_retires_its_slot() {
    let reach = model(|reach| {
        let (state, units, freed) = state(2, 1, 2);
        assert_eq!(
            state
                .table
                .begin_drain(units[0].index(), units[0].generation()),
            Some(slotpool::__internal::slots::Phase::Starting)
        );
        let raw = Raw(Arc::as_ptr(&state));
        assert!(
            !owner_lets_go(state),
            "units are out: the reference is parked"
        );
        let draining = owned_release_on_a_thread(raw, 0, units[0]);
        let other = owned_release(raw, 1, units[1]);
        let draining = draining.join().unwrap();
        assert!(freed.load(Ordering::SeqCst), "the state was not freed");
        assert!(draining != other, "freed once: {draining} {other}");
        reach.hit(if draining {
            "the retiring release was last"
        } else {
            "the other release was last"
        });
    });
    reach.explored(2).reached_all(&[
        "the retiring release was last",
        "the other release was last",
    ]);
}

/// An owned release that finds a waiter queued hands its unit over (the checked path inside
/// its window); the waiter, which borrows the pool's handle, returns the unit and lets go of
/// its handle, and then the owner lets go with no unit out and frees the state, while the
/// owned release may still be inside the table after its hand-over: the free waits for its
/// window.
#[test]
fn an_owned_release_handing_its_unit_to_a_waiter() {
    let reach = model(|reach| {
        let (state, units, freed) = state(1, 1, 1);
        let raw = Raw(Arc::as_ptr(&state));
        let waiter = {
            let state = Arc::clone(&state);
            thread::spawn(move || {
                let (got, slept) = block_on(waited(state.table.reserve()));
                state.table.release_held(got.expect("the unit comes back"));
                slept
            })
        };
        let releaser = owned_release_on_a_thread(raw, 0, units[0]);
        let slept = waiter.join().unwrap();
        let owner_freed = owner_lets_go(state);
        assert!(
            !releaser.join().unwrap(),
            "no unit was out when the owner let go"
        );
        assert!(owner_freed, "the owner's drop frees the state");
        assert!(freed.load(Ordering::SeqCst), "the state was not freed");
        reach.hit(if slept {
            "the waiter slept and got the unit handed over"
        } else {
            "the release came first"
        });
    });
    reach.explored(2).reached_all(&[
        "the waiter slept and got the unit handed over",
        "the release came first",
    ]);
}
