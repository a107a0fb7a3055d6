#![cfg(slotpool_loom)]
//! Loom models of the channel and client protocols: the exclusive-slot protocol under
//! `ClientPool` (`slotpool::__internal::exclusive::ExclusiveSlots`: the slot table with `max_load = 1`, whose
//! slot word alone hands out the client, plus the idle word the reaper's handshake uses and the
//! client's `UnsafeCell`, whose accesses loom checks never overlap) and the shared-slot
//! protocol under `ChannelPool` (`slotpool::__internal::shared::SharedSlots`: the table plus the share
//! word's holder count).
//!
//! The tokio pools are compiled out under loom; they add nothing to these races but a clock
//! read and the factory's await, which happen outside every protocol step modelled here.
//!
//! Each model counts, with [`slotpool_loom_tests::Reach`], that it reaches the race it is named
//! for and explores more than one execution (see the crate docs).
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --test channel_client --target-dir target/loom`.

use loom::future::block_on;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use slotpool::__internal::exclusive::{CellState, CheckIn, Checkout, ExclusiveSlots};
use slotpool::__internal::shared::{Joined, Left, ShareState, SharedSlots, MAX_STAMP};
use slotpool::__internal::slots::Capacity;
use slotpool::TryAcquireError;
use slotpool_loom_tests::{model, waited};

/// A one-slot exclusive table holding `value` idle (stamp 0).
fn one_idle_client(value: u32) -> ExclusiveSlots<u32> {
    let slots = ExclusiveSlots::new(Capacity::Bounded(1)).unwrap();
    let Ok(Checkout::Vacant { lease }) = slots.try_checkout() else {
        panic!("an empty table claims");
    };
    slots.occupy(&lease);
    assert!(matches!(slots.check_in(lease, value, 0), CheckIn::Kept));
    assert_eq!(slots.state(0), Some(CellState::Idle));
    slots
}

/// A reap racing an acquire on one idle client: the client goes to exactly one of them. If the
/// acquirer got it, the reaper took nothing and the client is Busy; if the reaper got it, the
/// acquirer never sees it (it claims the emptied slot, or finds no capacity while the slot
/// drains), and no capacity is lost. Reached: the reaper winning; the acquirer winning after the
/// reaper had found the client idle and expired (its predicate ran), so the handshake decided;
/// and the reaper finding the client held (or returned with a fresh stamp).
#[test]
fn client_reap_vs_acquire() {
    let reach = model(|reach| {
        let slots = Arc::new(one_idle_client(7));
        let acquirer = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || match slots.try_checkout() {
                Ok(Checkout::Idle { lease, value }) => {
                    assert_eq!(slots.state(0), Some(CellState::Busy));
                    assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
                    Some(value)
                }
                Ok(Checkout::Vacant { lease }) => {
                    slots.retire(lease);
                    None
                }
                Err(TryAcquireError::NoCapacity) => None,
                Err(e) => panic!("unexpected {e:?}"),
            })
        };
        // The reaper runs on a thread of its own too: loom then explores either party
        // running first as freely as any interleaving of the two.
        let reaper = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let mut considered = false;
                let reaped = slots.reap(|stamp| {
                    considered = true;
                    stamp == 0
                });
                (reaped.into_iter().collect::<Vec<_>>(), considered)
            })
        };
        let acquired = acquirer.join().unwrap();
        let (reaped, considered) = reaper.join().unwrap();
        match (acquired, reaped.as_slice()) {
            // The acquirer won; the reaper's CAS failed (or it saw the fresh stamp 1).
            (Some(7), []) => {
                reach.hit(if considered {
                    "the acquirer won a client the reaper found expired"
                } else {
                    "the reaper found the client held or fresh"
                });
                assert_eq!(slots.state(0), Some(CellState::Idle));
            }
            // The reaper won; the acquirer never had the client.
            (None, [(7, 0)]) => {
                reach.hit("the reaper won");
                assert_eq!(slots.state(0), Some(CellState::Empty));
            }
            other => panic!("client handed out twice or lost: {other:?}"),
        }
        // No capacity leaked: the one slot can be taken again.
        assert!(slots.try_checkout().is_ok());
    });
    reach.explored(2).reached_all(&[
        "the reaper found the client held or fresh",
        "the reaper won",
        "the acquirer won a client the reaper found expired",
    ]);
}

/// Two callers race for a one-client pool (checkout waits on the gate): each gets the client
/// in turn, never both at once, and the client is never lost or duplicated. Reached: a caller
/// slept on the gate and was woken by the other's check-in.
#[test]
fn released_client_is_never_handed_to_two_callers() {
    let reach = model(|reach| {
        let slots = Arc::new(one_idle_client(7));
        let holders = Arc::new(AtomicUsize::new(0));
        let caller = |slots: Arc<ExclusiveSlots<u32>>, holders: Arc<AtomicUsize>, stamp: u64| {
            let (checkout, slept) = block_on(waited(slots.checkout()));
            let Checkout::Idle { lease, value } = checkout.unwrap() else {
                panic!("the one slot is never vacant here");
            };
            assert_eq!(value, 7);
            assert_eq!(
                holders.fetch_add(1, Ordering::SeqCst),
                0,
                "two holders at once"
            );
            holders.fetch_sub(1, Ordering::SeqCst);
            assert!(matches!(slots.check_in(lease, value, stamp), CheckIn::Kept));
            slept
        };
        let other = {
            let (slots, holders) = (Arc::clone(&slots), Arc::clone(&holders));
            thread::spawn(move || caller(slots, holders, 1))
        };
        let main_slept = caller(Arc::clone(&slots), Arc::clone(&holders), 2);
        let other_slept = other.join().unwrap();
        reach.hit_if(
            main_slept || other_slept,
            "a caller slept until the check-in",
        );
        let counts = slots.counts();
        assert_eq!(
            (counts.live, counts.idle, counts.table.in_flight),
            (1, 1, 0)
        );
    });
    reach
        .explored(2)
        .reached("a caller slept until the check-in");
}

/// A wait that starts right after a failed try (`checkout_after_try`, what the managed and
/// client pools' `get` does) skips the try a wait makes before it queues, and a return racing
/// it must still reach it: the client ends with the waiter whether the return comes before
/// the try, between the try and the queueing, or after. Reached: the try itself took the
/// returned client; the waiter's one try after queueing took it (the return came before the
/// waiter queued, with no wake-up for it); and the waiter slept until the return handed it
/// over.
#[test]
fn a_wait_after_a_failed_try_misses_no_return() {
    let reach = model(|reach| {
        let slots = Arc::new(one_idle_client(7));
        let Ok(Checkout::Idle { lease, value }) = slots.try_checkout() else {
            panic!("the one client is idle");
        };
        let returner = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
            })
        };
        let (checkout, waited_for) = match slots.try_checkout() {
            Ok(checkout) => {
                reach.hit("the try took the returned client");
                (checkout, None)
            }
            Err(error) => {
                assert_eq!(error, TryAcquireError::NoCapacity);
                let (checkout, slept) = block_on(waited(slots.checkout_after_try()));
                (checkout.expect("not closed"), Some(slept))
            }
        };
        let Checkout::Idle { lease, value } = checkout else {
            panic!("the one slot is never vacant here");
        };
        assert_eq!(value, 7);
        returner.join().unwrap();
        reach.hit_if(
            waited_for == Some(true),
            "the waiter slept until the return",
        );
        reach.hit_if(
            waited_for == Some(false),
            "the waiter's try after queueing took it",
        );
        assert!(matches!(slots.check_in(lease, value, 2), CheckIn::Kept));
        let counts = slots.counts();
        assert_eq!(
            (counts.live, counts.idle, counts.table.in_flight),
            (1, 1, 0)
        );
    });
    reach
        .explored(3)
        .reached("the try took the returned client")
        .reached("the waiter slept until the return")
        .reached("the waiter's try after queueing took it");
}

/// A reap racing the checkout and return of a client whose idle word says `Idle(0)` (expired):
/// the reaper may find the client idle, and then win the idle word while the client is out,
/// but it must see the holder and give the word back, lose to the acquirer's abort, or fail
/// against the fresh stamp of the check-in. It never takes a client in use: the client ends
/// idle with its new stamp. (Or the reaper takes the idle client before the checkout, which
/// then finds the slot empty or draining.)
///
/// Reached: the reaper found the client idle and expired (its predicate ran on stamp 0) and
/// the holder still got and returned it; and the reaper winning before the checkout.
#[test]
fn client_reap_vs_check_in() {
    let reach = model(|reach| {
        let slots = Arc::new(one_idle_client(7));
        let holder = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || match slots.try_checkout() {
                Ok(Checkout::Idle { lease, value }) => {
                    assert!(matches!(slots.check_in(lease, value + 1, 5), CheckIn::Kept));
                    true
                }
                Ok(Checkout::Vacant { lease }) => {
                    slots.retire(lease);
                    false
                }
                Err(TryAcquireError::NoCapacity) => false,
                Err(e) => panic!("unexpected {e:?}"),
            })
        };
        let mut considered = Vec::new();
        let reaped = slots.reap(|stamp| {
            considered.push(stamp);
            stamp == 0
        });
        let held = holder.join().unwrap();
        if !held {
            // The reaper took the idle client before the checkout.
            assert_eq!(reaped.as_slice(), [(7, 0)]);
            reach.hit("the reaper won before the checkout");
            return;
        }
        assert!(reaped.is_empty(), "reaped a client in use: {reaped:?}");
        reach.hit_if(
            considered.contains(&0),
            "the reaper found the client expired, then lost it to the holder",
        );
        assert_eq!(slots.state(0), Some(CellState::Idle));
        let Ok(Checkout::Idle { lease, value }) = slots.try_checkout() else {
            panic!("the returned client is idle");
        };
        assert_eq!(value, 8);
        assert!(matches!(slots.check_in(lease, value, 6), CheckIn::Kept));
        // Now expired by the predicate: the next pass takes it.
        assert_eq!(slots.reap(|stamp| stamp == 6).len(), 1);
    });
    reach.explored(2).reached_all(&[
        "the reaper found the client expired, then lost it to the holder",
        "the reaper won before the checkout",
    ]);
}

/// `close` racing a check-in: the returned value never stays stranded in the closed table.
/// Either the check-in sees the close first and hands the value back (`Surplus`), or close's
/// pass takes it, or the check-in sees the close after its release and runs the closing pass
/// itself (`Trimmed`). Reached: both close's pass and the holder's taking it.
#[test]
fn close_vs_check_in_strands_nothing() {
    let reach = model(|reach| {
        let slots = Arc::new(one_idle_client(7));
        let Ok(Checkout::Idle { lease, value }) = slots.try_checkout() else {
            panic!("the idle client is taken");
        };
        let holder = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || match slots.check_in(lease, value, 1) {
                CheckIn::Kept => 0,
                CheckIn::Surplus(_) => 1,
                CheckIn::Trimmed(values) => values.len(),
            })
        };
        slots.close();
        let by_close = slots.reap(|_| true).len();
        let by_holder = holder.join().unwrap();
        assert_eq!(
            by_close + by_holder,
            1,
            "the client was lost or reaped twice"
        );
        reach.hit(if by_close == 1 {
            "close's pass took it"
        } else {
            "the holder's closing pass took it"
        });
        assert_eq!(slots.counts().live, 0);
        assert_eq!(slots.live(), 0, "the live count is exact");
    });
    reach
        .explored(2)
        .reached_all(&["close's pass took it", "the holder's closing pass took it"]);
}

/// A reap racing a join on one idle channel: a joiner that registers keeps the channel (the
/// reaper's CAS fails); if the reaper wins, the joiner never gets the reaped channel (it opens
/// a new one in the emptied slot or the next). Reached: the reaper winning; the joiner keeping
/// a channel the reaper had found idle and expired (they raced on the share word); and the
/// reaper finding the channel already held.
#[test]
fn channel_reap_vs_join() {
    let reach = model(|reach| {
        let slots = Arc::new(SharedSlots::<u32>::new(2).unwrap());
        let Joined::Vacant(lease) = slots.join() else {
            panic!("an empty table claims");
        };
        let first = slots.open(lease, 7);
        slots.leave(first, 0);
        let joiner = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let share = match slots.join() {
                    Joined::Shared(share) => share,
                    Joined::Vacant(lease) => slots.open(lease, 8),
                };
                let got = *share.value();
                let index = share.index();
                // Hold it: the reaper must not take it while held.
                (got, index, share)
            })
        };
        // The reaper runs on a thread of its own too: loom then explores either party
        // running first as freely as any interleaving of the two.
        let reaper = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let mut considered = false;
                let reaped = slots.reap(|stamp| {
                    considered = true;
                    stamp == 0
                });
                let reaped: Vec<(usize, u32)> =
                    reaped.iter().map(|(i, inc)| (*i, *inc.value())).collect();
                (reaped, considered)
            })
        };
        let (got, index, share) = joiner.join().unwrap();
        let (reaped, considered) = reaper.join().unwrap();
        match (got, reaped.as_slice()) {
            (7, []) => {
                reach.hit(if considered {
                    "the joiner kept a channel the reaper found expired"
                } else {
                    "the reaper found the channel held"
                });
            }
            (8, [(0, 7)]) => {
                reach.hit("the reaper won, the joiner opened another");
            }
            other => panic!("a reaped channel was handed out, or one was lost: {other:?}"),
        }
        assert_eq!(
            slots.state(index),
            Some((ShareState::Open, 1)),
            "got {got} on {index}, reaped {reaped:?}, {slots:?}"
        );
        slots.leave(share, 5);
        assert_eq!(slots.counts().holders, 0);
        // Whatever is open now is idle since 5 and reapable.
        assert_eq!(slots.reap(|stamp| stamp >= 5).len(), 1);
        assert_eq!(slots.counts().open, 0);
    });
    reach.explored(2).reached_all(&[
        "the reaper found the channel held",
        "the reaper won, the joiner opened another",
        "the joiner kept a channel the reaper found expired",
    ]);
}

/// Two joiners on an empty table with room for two: one claims and opens the channel, the
/// other joins the Starting slot and waits for the publication; both share one channel.
/// Reached: the joiner had reserved its unit on the claimed slot before the claimer published
/// the channel (the claimer sees both units taken before it opens), so it had to wait.
#[test]
fn channel_join_waits_for_the_claimers_publication() {
    let reach = model(|reach| {
        let slots = Arc::new(SharedSlots::<u32>::new(2).unwrap());
        let get = |slots: &SharedSlots<u32>| match slots.join() {
            Joined::Shared(share) => (share, false),
            Joined::Vacant(lease) => {
                let early = slots.counts().table.in_flight == 2;
                (slots.open(lease, 7), early)
            }
        };
        let other = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let (share, early) = get(&slots);
                (share.index(), *share.value(), share, early)
            })
        };
        let (mine, main_saw_early) = get(&slots);
        let (index, value, theirs, other_saw_early) = other.join().unwrap();
        reach.hit_if(
            main_saw_early || other_saw_early,
            "the joiner reserved before the publication",
        );
        assert_eq!(
            (*mine.value(), value),
            (7, 7),
            "each got a published channel"
        );
        if mine.index() == index {
            // The usual case: the second caller joined the Starting channel.
            assert_eq!(slots.state(index), Some((ShareState::Open, 2)));
        } else {
            // The slot table lets a caller that crossed the claim in flight claim the next
            // slot (its hints are hints); then each channel has one holder.
            assert_eq!(slots.state(index), Some((ShareState::Open, 1)));
            assert_eq!(slots.state(mine.index()), Some((ShareState::Open, 1)));
        }
        slots.leave(mine, 1);
        slots.leave(theirs, 2);
        assert_eq!(slots.counts().holders, 0);
        assert_eq!(slots.counts().table.in_flight, 0);
    });
    reach
        .explored(2)
        .reached("the joiner reserved before the publication");
}

/// The channel pool's broken release racing a join: the broken client leaves with the mark
/// (the largest stamp) and, finding no holder left, reaps marked channels; a joiner joins at
/// the same time and later leaves normally, and whoever leaves a marked channel empty reaps
/// it (`ChannelShared::released`). The joiner never gets a reaped channel (it keeps the
/// marked one, or opens a new one after the reap), and at the end no marked channel is open:
/// the mark closes the channel whichever release was last. Reached: the broken release
/// closing it; the joiner's release closing it; the joiner opening a fresh channel.
#[test]
fn broken_release_vs_join() {
    let released = |slots: &SharedSlots<u32>, left: Left| -> usize {
        if left.holders == 0 && left.stamp == MAX_STAMP {
            slots.reap(|stamp| stamp == MAX_STAMP).len()
        } else {
            0
        }
    };
    let reach = model(move |reach| {
        let slots = Arc::new(SharedSlots::<u32>::new(2).unwrap());
        let Joined::Vacant(lease) = slots.join() else {
            panic!("an empty table claims");
        };
        let broken = slots.open(lease, 7);
        let joiner = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let share = match slots.join() {
                    Joined::Shared(share) => share,
                    Joined::Vacant(lease) => slots.open(lease, 8),
                };
                let got = *share.value();
                let left = slots.leave(share, 5);
                (got, released(&slots, left))
            })
        };
        let left = slots.leave(broken, MAX_STAMP);
        let closed_by_broken = released(&slots, left);
        let (got, closed_by_joiner) = joiner.join().unwrap();
        match (got, closed_by_broken, closed_by_joiner) {
            (7, 1, 0) => reach.hit("the broken release closed it"),
            (7, 0, 1) => reach.hit("the joiner's release closed it"),
            (8, 1, 0) => reach.hit("the joiner opened a fresh channel"),
            other => {
                panic!("a marked channel was handed out after its close, or stayed: {other:?}")
            }
        }
        let counts = slots.counts();
        assert_eq!(counts.holders, 0);
        assert_eq!(
            counts.open,
            usize::from(got == 8),
            "only an unmarked channel stays"
        );
    });
    reach.explored(2).reached_all(&[
        "the broken release closed it",
        "the joiner's release closed it",
        "the joiner opened a fresh channel",
    ]);
}
