//! Loom models of the slot table: the slot-word CAS protocol, the bitmap hints and their
//! interplay with the gate.
//!
//! Each model counts, with [`slotpool_loom_tests::Reach`], that it reaches the race it is named
//! for and explores more than one execution (see the crate docs).
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --test slots --target-dir target/loom`.
#![cfg(slotpool_loom)]

use loom::future::block_on;
use loom::sync::Arc;
use loom::thread;
use slotpool::__internal::slots::{Capacity, Phase, SlotTable};
use slotpool::TryAcquireError;
use slotpool_loom_tests::{model, waited};

/// A table whose slots are all Ready and full; returns their reservations.
fn full_table(
    slots: usize,
    max_load: u32,
) -> (SlotTable, Vec<slotpool::__internal::slots::Reservation>) {
    let table = SlotTable::new(Capacity::Bounded(slots), max_load).unwrap();
    let mut held = Vec::new();
    for _ in 0..slots * max_load as usize {
        let r = table.try_reserve().unwrap();
        if r.claimed() {
            assert!(table.mark_ready(r.index(), r.generation()));
        }
        held.push(r);
    }
    assert_eq!(table.try_reserve(), Err(TryAcquireError::NoCapacity));
    (table, held)
}

/// Every unit of capacity can be reserved once the dust settles: the hints hide nothing.
fn assert_all_capacity_visible(table: &SlotTable, slots: usize, max_load: u32) {
    assert!(
        table.hints_settled(),
        "a hint is missing once callers are done"
    );
    let stats = table.stats();
    let mut taken = Vec::new();
    let free = slots as u64 * u64::from(max_load) - stats.in_flight;
    for _ in 0..free {
        taken.push(
            table
                .try_reserve()
                .expect("capacity hidden by a stale hint"),
        );
    }
    assert_eq!(table.try_reserve(), Err(TryAcquireError::NoCapacity));
    for r in taken {
        assert!(table.release(r));
    }
}

/// Reserve racing release on a full slot: the waiting reserver gets the released unit (never
/// sleeps while it is free), and the load never exceeds the cap. Reached: the reserver slept
/// and was woken by the release (handed the unit), and the release came first.
#[test]
fn reserve_vs_release() {
    release_vs_waiter(|table, r| assert!(table.release(r)));
}

/// [`reserve_vs_release`] with `release_held`, from full, while the caller waits for that
/// slot: the waiter gets the unit (handed over if it queued first, else through the room bit
/// and the notify of rule 1) and is never left asleep next to it. Reached: as there.
#[test]
fn held_release_wakes_a_waiter() {
    release_vs_waiter(|table, r| table.release_held(r));
}

/// A waiter on a one-slot, one-unit table while the holder gives its unit back with `release`;
/// both reaches must occur and more than one execution be explored.
fn release_vs_waiter(release: fn(&SlotTable, slotpool::__internal::slots::Reservation)) {
    let reach = model(move |reach| {
        let (table, mut held) = full_table(1, 1);
        let table = Arc::new(table);
        let r = held.pop().unwrap();
        let waiter = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let (got, slept) = block_on(waited(table.reserve()));
                let got = got.unwrap();
                assert!(!got.claimed());
                release(&table, got);
                slept
            })
        };
        release(&table, r);
        let slept = waiter.join().unwrap();
        reach.hit(if slept {
            "the reserver slept and the release woke it"
        } else {
            "the release came first"
        });
        assert_eq!(table.stats().in_flight, 0);
        assert_all_capacity_visible(&table, 1, 1);
    });
    reach.explored(2).reached_all(&[
        "the reserver slept and the release woke it",
        "the release came first",
    ]);
}

/// Claim racing join on one Empty slot of depth 2: exactly one caller claims (and so starts
/// the resource); the other joins the Starting slot; load is 2. Reached: each thread claims in
/// some execution.
#[test]
fn claim_vs_join() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(1), 2).unwrap());
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve().unwrap())
        };
        let mine = table.try_reserve().unwrap();
        let theirs = other.join().unwrap();
        assert_eq!(mine.index(), theirs.index());
        assert!(mine.claimed() ^ theirs.claimed(), "exactly one claim");
        reach.hit(if mine.claimed() {
            "main claimed, the other joined"
        } else {
            "the other claimed, main joined"
        });
        let word = table.word(0).unwrap();
        assert_eq!(word.phase(), Phase::Starting);
        assert_eq!(word.load(), 2);
        assert_eq!(table.try_reserve(), Err(TryAcquireError::NoCapacity));
    });
    reach.explored(2).reached_all(&[
        "main claimed, the other joined",
        "the other claimed, main joined",
    ]);
}

/// Two reservers on a two-slot table of depth 2: whatever the interleaving, both land on slot
/// 0 (one claims, one joins) and slot 1 stays Empty. A reserver that crosses another's claim
/// (it lost the claiming CAS, or it read the vacancy bitmap after the claimer cleared its bit
/// but the room bitmap before the claimer set it) joins the new resource instead of starting
/// a second one: concurrent callers fill a starting resource before opening another.
/// Reached: the joiner saw slot 0 Empty just before its reservation and still joined, so the
/// claim happened while it reserved (it crossed the claim), with either thread as the claimer.
#[test]
fn crossing_a_claim_joins_it() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(2), 2).unwrap());
        let reserve = |table: &SlotTable| {
            let before = table.word(0).unwrap().phase();
            let r = table.try_reserve().unwrap();
            (r, !r.claimed() && before == Phase::Empty)
        };
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || reserve(&table))
        };
        let (mine, main_crossed) = reserve(&table);
        let (theirs, other_crossed) = other.join().unwrap();
        assert_eq!(
            (mine.index(), theirs.index()),
            (0, 0),
            "a second resource started"
        );
        assert!(mine.claimed() ^ theirs.claimed(), "exactly one claim");
        assert_eq!(table.word(1).unwrap().phase(), Phase::Empty);
        reach.hit_if(main_crossed, "main crossed the other's claim");
        reach.hit_if(other_crossed, "the other crossed main's claim");
    });
    reach.explored(2).reached_all(&[
        "main crossed the other's claim",
        "the other crossed main's claim",
    ]);
}

/// Concurrent spin-ups on a two-slot table of depth 1 claim two different slots and never a
/// third. Reached: each thread gets slot 0 in some execution.
#[test]
fn concurrent_claims_never_overshoot() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(2), 1).unwrap());
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve())
        };
        let mine = table.try_reserve().unwrap();
        let theirs = other.join().unwrap().unwrap();
        assert!(mine.claimed() && theirs.claimed());
        assert_ne!(mine.index(), theirs.index());
        assert_eq!(table.try_reserve(), Err(TryAcquireError::NoCapacity));
        reach.hit(if mine.index() == 0 {
            "main claimed slot 0"
        } else {
            "the other claimed slot 0"
        });
    });
    reach
        .explored(2)
        .reached_all(&["main claimed slot 0", "the other claimed slot 0"]);
}

/// Retire (the reaper) racing a reservation on an idle Ready slot: either the reservation
/// wins and the slot stays (the reaper's CAS fails), or the reaper retires it and the
/// reservation claims the next generation. A release carrying the old generation afterwards
/// changes nothing. Reached: both winners, and the stale release refused.
#[test]
fn retire_vs_reserve_with_stale_release() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(1), 1).unwrap());
        let first = table.try_reserve().unwrap();
        assert!(table.mark_ready(first.index(), first.generation()));
        assert!(table.release(first));
        // First reaper pass notes the slot idle (clears `used`).
        table.reap_idle(0, 0, |_, _| panic!("not idle long enough yet"));
        let reserver = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve().unwrap())
        };
        let mut retired = Vec::new();
        table.reap_idle(1, 0, |r, _| retired.push(r));
        let got = reserver.join().unwrap();
        let word = table.word(0).unwrap();
        if retired.is_empty() {
            // The reservation won: same incarnation, Ready, load 1.
            reach.hit("the reservation won");
            assert!(!got.claimed());
            assert_eq!(got.generation(), first.generation());
            assert_eq!((word.phase(), word.load()), (Phase::Ready, 1));
        } else {
            // The reaper won: the reservation claimed the next incarnation.
            reach.hit("the reaper won");
            assert_eq!(retired[0].generation, first.generation());
            assert!(got.claimed());
            assert_eq!(got.generation(), first.generation().next());
            assert_eq!((word.phase(), word.load()), (Phase::Starting, 1));
            // A stale release of the old incarnation is a no-op.
            assert!(!table.release(first));
            assert_eq!(table.word(0).unwrap(), word);
        }
        assert!(table.release(got));
    });
    reach
        .explored(2)
        .reached_all(&["the reservation won", "the reaper won"]);
}

/// A reservation racing the reaper's retire of a higher slot while a lower slot is Empty with
/// its vacancy published: between the retiring CAS and the vacancy it publishes, the retired
/// slot is Empty behind a stale room bit, which a scan meets first. The reservation joins the
/// retired slot before the reaper's CAS (it had room), or claims the lowest Empty slot, never
/// the retired one while a lower Empty slot is published (the sequential model's lowest Empty
/// slot; the linearizability check of the stream pool caught the scan claiming the higher one).
/// Reached: the join, and the claim of the lower slot after the retire.
#[test]
fn retire_vs_reserve_claims_the_lowest_empty_slot() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(3), 1).unwrap());
        let held: Vec<_> = (0..3)
            .map(|_| {
                let r = table.try_reserve().unwrap();
                assert!(r.claimed() && table.mark_ready(r.index(), r.generation()));
                r
            })
            .collect();
        let mut held = held.into_iter();
        let (zero, one, two) = (
            held.next().unwrap(),
            held.next().unwrap(),
            held.next().unwrap(),
        );
        // Slot 0 ends (Empty, vacancy published); slot 1 stays full; slot 2 idle, its room
        // bit set, noted idle by a first reaper pass.
        assert_eq!(table.begin_drain(0, zero.generation()), Some(Phase::Ready));
        assert!(table.release(zero));
        assert!(table.release(two));
        table.reap_idle(0, 0, |_, _| panic!("not idle long enough yet"));
        let reserver = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve().unwrap())
        };
        let mut retired = Vec::new();
        table.reap_idle(1, 0, |r, _| retired.push(r.index));
        let got = reserver.join().unwrap();
        if got.index() == 2 {
            reach.hit("joined slot 2 before its retire");
            assert!(
                !got.claimed(),
                "slot 2 claimed while slot 0 was the lowest Empty"
            );
            assert!(retired.is_empty());
        } else {
            assert_eq!((got.index(), got.claimed()), (0, true));
            if retired == [2] {
                reach.hit("claimed slot 0 after the retire");
            }
        }
        assert!(table.release(got));
        assert!(table.release(one));
    });
    reach.explored(2).reached_all(&[
        "joined slot 2 before its retire",
        "claimed slot 0 after the retire",
    ]);
}

/// Growth racing reservation on a full unbounded table: both reservers get distinct new
/// slots, the table grows by exactly one segment, and no live slot moved. Reached: each thread
/// gets the first new slot in some execution.
#[test]
fn growth_vs_reserve() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Unbounded, 1).unwrap());
        let first = table.stats().slots;
        let mut held = Vec::new();
        while held.len() < first {
            held.push(table.try_reserve().unwrap());
        }
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve().unwrap())
        };
        let mine = table.try_reserve().unwrap();
        let theirs = other.join().unwrap();
        assert!(mine.index() >= first && theirs.index() >= first);
        assert_ne!(mine.index(), theirs.index());
        assert_eq!(
            table.stats().slots,
            2 * first,
            "grew by exactly one segment"
        );
        // Live slots stayed where they were.
        for r in &held {
            assert!(table.is_current(r));
        }
        reach.hit(if mine.index() == first {
            "main took the first new slot"
        } else {
            "the other took the first new slot"
        });
        assert!(table.release(mine) && table.release(theirs));
    });
    reach.explored(2).reached_all(&[
        "main took the first new slot",
        "the other took the first new slot",
    ]);
}

/// The room hint is cleared by a reservation that fills a slot while a release from full
/// races it (clear-then-recheck): afterwards all free capacity is visible to a reserver.
/// Reached: the reservation filled the slot before the release (it sees load 2 right after),
/// so it cleared the room bit while the release was about to set it.
#[test]
fn fill_vs_release_keeps_the_hint_honest() {
    let reach = model(|reach| {
        let (table, mut held) = full_table(1, 2);
        let table = Arc::new(table);
        // One unit free, one held: the racing reserve fills the slot again.
        let r = held.pop().unwrap();
        assert!(table.release(r));
        let keep = held.pop().unwrap();
        let reserver = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let got = table.try_reserve().unwrap();
                (got, table.word(0).unwrap().load() == 2)
            })
        };
        assert!(table.release(keep));
        let (got, filled) = reserver.join().unwrap();
        reach.hit(if filled {
            "the reservation filled the slot first"
        } else {
            "the release came first"
        });
        assert_eq!(table.stats().in_flight, 1);
        assert_all_capacity_visible(&table, 1, 2);
        assert!(table.release(got));
    });
    reach.explored(2).reached_all(&[
        "the reservation filled the slot first",
        "the release came first",
    ]);
}

/// A waiter on a full two-slot table while one slot is released and another caller races
/// for it: the waiter is never left asleep while a unit is free (loom would report the
/// deadlock), and nothing is lost or doubled. Reached: the waiter slept, and the racer took
/// the freed unit in some execution and found none in another.
#[test]
fn waiter_never_sleeps_while_capacity_exists() {
    let reach = model(|reach| {
        let (table, mut held) = full_table(2, 1);
        let table = Arc::new(table);
        let r1 = held.pop().unwrap();
        let r0 = held.pop().unwrap();
        let waiter = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let (got, slept) = block_on(waited(table.reserve()));
                assert!(table.release(got.unwrap()));
                slept
            })
        };
        let racer = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                assert!(table.release(r0));
                match table.try_reserve() {
                    Ok(got) => {
                        assert!(table.release(got));
                        true
                    }
                    Err(_) => false,
                }
            })
        };
        let raced = racer.join().unwrap();
        let slept = waiter.join().unwrap();
        reach.hit_if(slept, "the waiter slept");
        reach.hit(if raced {
            "the racer took a unit"
        } else {
            "the racer found none"
        });
        assert!(table.release(r1));
        assert_eq!(table.stats().in_flight, 0);
        assert_all_capacity_visible(&table, 2, 1);
    });
    reach.explored(2).reached_all(&[
        "the waiter slept",
        "the racer took a unit",
        "the racer found none",
    ]);
}

/// A Starting slot that fails (drain) while a caller joins it: the joiner either got in
/// before the drain (and its release empties the slot) or found no room and claimed nothing
/// twice; the slot always ends Empty with the next generation once all load is released.
/// Reached: all three (joined before the drain, no room while draining, claimed the emptied
/// slot).
#[test]
fn drain_vs_join() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(1), 2).unwrap());
        let claim = table.try_reserve().unwrap();
        assert!(claim.claimed());
        let joiner = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve())
        };
        assert_eq!(
            table.begin_drain(claim.index(), claim.generation()),
            Some(Phase::Starting)
        );
        assert!(table.release(claim));
        match joiner.join().unwrap() {
            Ok(joined) => {
                if joined.claimed() {
                    // The slot drained and emptied first; the joiner started a new incarnation.
                    reach.hit("claimed the emptied slot");
                    assert_eq!(joined.generation(), claim.generation().next());
                } else {
                    reach.hit("joined before the drain");
                    assert_eq!(joined.generation(), claim.generation());
                }
                assert!(table.release(joined));
            }
            Err(e) => {
                reach.hit("no room while draining");
                assert_eq!(e, TryAcquireError::NoCapacity);
            }
        }
        let word = table.word(0).unwrap();
        assert_eq!(word.load(), 0);
        assert!(matches!(word.phase(), Phase::Empty | Phase::Starting));
    });
    reach.explored(3).reached_all(&[
        "claimed the emptied slot",
        "joined before the drain",
        "no room while draining",
    ]);
}

/// A three-slot bounded table starts with its first segment (two slots under loom) and grows
/// lazily. Two reservers racing on the full first segment: exactly one gets the third slot,
/// the other finds the table full; the table never allocates past its capacity and no live
/// slot moved. Reached: each reserver gets the last slot in some execution.
#[test]
fn bounded_growth_vs_reserve() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(3), 1).unwrap());
        assert_eq!(table.stats().slots, 2, "the first segment only");
        let held: Vec<_> = (0..2).map(|_| table.try_reserve().unwrap()).collect();
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve())
        };
        let mine = table.try_reserve();
        let theirs = other.join().unwrap();
        let got = match (mine, theirs) {
            (Ok(got), Err(e)) => {
                assert_eq!(e, TryAcquireError::NoCapacity);
                reach.hit("main grew the table and got the last slot");
                got
            }
            (Err(e), Ok(got)) => {
                assert_eq!(e, TryAcquireError::NoCapacity);
                reach.hit("the other grew the table and got the last slot");
                got
            }
            other => panic!("exactly one reserver gets the last slot: {other:?}"),
        };
        assert_eq!(got.index(), 2);
        assert!(got.claimed());
        assert_eq!(table.stats().slots, 3, "grew to its capacity, not past it");
        for r in &held {
            assert!(table.is_current(r));
        }
        assert_eq!(table.try_reserve(), Err(TryAcquireError::NoCapacity));
        assert!(table.release(got));
        for r in held {
            assert!(table.release(r));
        }
    });
    reach.explored(2).reached_all(&[
        "main grew the table and got the last slot",
        "the other grew the table and got the last slot",
    ]);
}

/// A waiter and a racer on a bounded table whose first segment is full, while a held unit is
/// released: the table grows at most to its capacity, the waiter is never left asleep while a
/// unit is free (a lost wake-up is a loom deadlock), and every unit is visible afterwards.
/// Reached: the waiter slept and was woken; the racer got a unit, and found none.
#[test]
fn bounded_growth_vs_waiter() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(3), 1).unwrap());
        let mut held: Vec<_> = (0..2).map(|_| table.try_reserve().unwrap()).collect();
        let waiter = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let (got, slept) = block_on(waited(table.reserve()));
                assert!(table.release(got.unwrap()));
                slept
            })
        };
        let racer = {
            let table = Arc::clone(&table);
            thread::spawn(move || match table.try_reserve() {
                Ok(got) => {
                    assert!(table.release(got));
                    true
                }
                Err(_) => false,
            })
        };
        assert!(table.release(held.pop().unwrap()));
        let racer_got = racer.join().unwrap();
        let slept = waiter.join().unwrap();
        reach.hit_if(slept, "the waiter slept and was woken");
        reach.hit(if racer_got {
            "the racer got a unit"
        } else {
            "the racer found no room"
        });
        assert!(table.stats().slots <= 3);
        assert!(table.release(held.pop().unwrap()));
        assert_eq!(table.stats().in_flight, 0);
        assert_all_capacity_visible(&table, 3, 1);
    });
    reach.explored(2).reached_all(&[
        "the waiter slept and was woken",
        "the racer got a unit",
        "the racer found no room",
    ]);
}

/// A slot filled by a join keeps its room bit (stale) until a scan finds it full, so that a
/// release from full finds the bit set and skips rewriting it. Here a reserver finds the full
/// slot and clears its stale bit while its holder releases it: the release saw the bit set
/// and wrote nothing, so only the clearer's re-read of the slot (rule 2) can set the bit
/// again. Whatever the interleaving, no capacity is hidden afterwards. Reached: the reserver
/// took the released slot 0, and claimed slot 1 past the full one.
#[test]
fn lazy_room_bit_vs_stale_scan() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(2), 1).unwrap());
        let claim = table.try_reserve().unwrap();
        assert!(table.mark_ready(claim.index(), claim.generation()));
        assert!(table.release(claim));
        // A join fills slot 0 and leaves its room bit set.
        let held = table.try_reserve().unwrap();
        assert_eq!((held.index(), held.claimed()), (0, false));
        let reserver = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve().unwrap())
        };
        table.release_held(held);
        let got = reserver.join().unwrap();
        reach.hit(match (got.index(), got.claimed()) {
            (0, false) => "the reserver took the released slot 0",
            (1, true) => "the reserver claimed slot 1 past the full one",
            other => panic!("unexpected reservation {other:?}"),
        });
        assert_eq!(table.stats().in_flight, 1);
        assert_all_capacity_visible(&table, 2, 1);
        assert!(table.release(got));
    });
    reach.explored(2).reached_all(&[
        "the reserver took the released slot 0",
        "the reserver claimed slot 1 past the full one",
    ]);
}

/// `release_held` is one `fetch_sub`; the one that takes a Draining slot to load 0 retires
/// it. A held release racing a drain and the drainer's own held release: the slot always ends
/// Empty in the next generation, its vacancy published, whichever unit went last. Reached:
/// either release is the last.
#[test]
fn held_release_vs_drain() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(1), 2).unwrap());
        let claim = table.try_reserve().unwrap();
        let joined = table.try_reserve().unwrap();
        assert!(table.mark_ready(claim.index(), claim.generation()));
        let releaser = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.release_held(joined))
        };
        assert_eq!(
            table.begin_drain(claim.index(), claim.generation()),
            Some(Phase::Ready)
        );
        table.release_held(claim);
        // Empty right after the drainer's release iff the other unit was back already.
        reach.hit(if table.word(0).unwrap().phase() == Phase::Empty {
            "the drainer's release went last"
        } else {
            "the other release went last"
        });
        releaser.join().unwrap();
        let word = table.word(0).unwrap();
        assert_eq!((word.phase(), word.load()), (Phase::Empty, 0));
        assert_eq!(word.generation(), claim.generation().next());
        assert_all_capacity_visible(&table, 1, 2);
    });
    reach.explored(2).reached_all(&[
        "the drainer's release went last",
        "the other release went last",
    ]);
}

/// The summary of the room words (under loom a bitmap word holds one slot, so slot 1 is word
/// 1, which the summary covers). Slot 1 is full with its room bit stale; a reserver finds it
/// full and clears the bit, which empties word 1 and clears its summary bit, while the holder
/// releases it, which sets word 1 again. The clearer re-reads word 1 after clearing the
/// summary bit, so afterwards the summary flags every non-zero word (`hints_settled`).
/// Reached: the reserver got slot 1 back, and found no room before the release.
#[test]
fn room_summary_vs_release() {
    let reach = model(|reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(2), 1).unwrap());
        let first = table.try_reserve().unwrap();
        let second = table.try_reserve().unwrap();
        assert_eq!((first.index(), second.index()), (0, 1));
        assert!(table.mark_ready(second.index(), second.generation()));
        assert!(table.release(second));
        // A join fills slot 1 and leaves its room bit (word 1, flagged in the summary) set.
        let held = table.try_reserve().unwrap();
        assert_eq!((held.index(), held.claimed()), (1, false));
        let reserver = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.try_reserve().ok())
        };
        assert!(table.release(held));
        if let Some(got) = reserver.join().unwrap() {
            assert_eq!(got.index(), 1);
            assert!(table.release(got));
            reach.hit("the reserver got slot 1 back");
        } else {
            reach.hit("the reserver found no room before the release");
        }
        assert!(table.hints_settled(), "the summary lost a non-zero word");
        assert!(table.release(first));
        assert_all_capacity_visible(&table, 2, 1);
    });
    reach.explored(2).reached_all(&[
        "the reserver got slot 1 back",
        "the reserver found no room before the release",
    ]);
}

/// A release from below full makes sure of the room bit too. Slot 0 is full and its room bit
/// cleared (a reserver found it full and went on to claim slot 1). One unit goes back through
/// one release, which takes the slot from full and may be preempted between its RMW and its
/// hint; the other through the other release, which finds the slot not full. Right after the
/// second kind of release, slot 0 has room whatever the other did, so a reservation joins it:
/// it must not go past it to slot 1 (hidden room, as when only the release from full set the
/// bit). Reached: the racing release had landed before the reservation, and had not.
#[test]
fn release_below_full_publishes_room() {
    below_full_publishes_room(
        |table, r| assert!(table.release(r)),
        |table, r| table.release_held(r),
    );
}

/// [`release_below_full_publishes_room`] with the roles swapped: the held release may take the
/// slot from full, and the checked release is the one that may find it below full.
#[test]
fn checked_release_below_full_publishes_room() {
    below_full_publishes_room(
        |table, r| table.release_held(r),
        |table, r| assert!(table.release(r)),
    );
}

/// Slot 0 full with its bit cleared; `racing` gives one unit back on a thread while `mine`
/// gives the other back here, then a reservation must join slot 0.
fn below_full_publishes_room(
    racing: fn(&SlotTable, slotpool::__internal::slots::Reservation),
    mine: fn(&SlotTable, slotpool::__internal::slots::Reservation),
) {
    let reach = model(move |reach| {
        let table = Arc::new(SlotTable::<()>::new(Capacity::Bounded(3), 2).unwrap());
        let first = table.try_reserve().unwrap();
        assert!(table.mark_ready(first.index(), first.generation()));
        let second = table.try_reserve().unwrap();
        assert_eq!(second.index(), 0);
        // Finds slot 0 full (clearing its bit) and claims slot 1, which keeps room.
        let other = table.try_reserve().unwrap();
        assert_eq!((other.index(), other.claimed()), (1, true));
        let releaser = {
            let table = Arc::clone(&table);
            thread::spawn(move || racing(&table, first))
        };
        mine(&table, second);
        let got = table.try_reserve().unwrap();
        assert_eq!(got.index(), 0, "room on slot 0 hidden: joined {got:?}");
        reach.hit(if table.word(0).unwrap().load() == 1 {
            "the racing release had not landed"
        } else {
            "the racing release had landed"
        });
        releaser.join().unwrap();
        assert!(table.release(got));
        assert!(table.release(other));
    });
    reach.explored(2).reached_all(&[
        "the racing release had not landed",
        "the racing release had landed",
    ]);
}
