#![cfg(slotpool_loom)]
//! Loom models of the channel and client protocols: the exclusive-slot protocol under
//! `ClientPool` (`slotpool::exclusive::ExclusiveSlots`: the slot table with `max_load = 1`, whose
//! slot word alone hands out the client, plus the idle word the reaper's handshake uses and the
//! client's `UnsafeCell`, whose accesses loom checks never overlap) and the shared-slot
//! protocol under `ChannelPool` (`slotpool::shared::SharedSlots`: the table plus the share
//! word's holder count).
//!
//! The tokio pools are compiled out under loom; they add nothing to these races but a clock
//! read and the factory's await, which happen outside every protocol step modelled here.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p
//! slotpool-loom-tests --test channel_client --target-dir target/loom`.

use loom::future::block_on;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use slotpool::exclusive::{CellState, CheckIn, Checkout, ExclusiveSlots};
use slotpool::shared::{Joined, ShareState, SharedSlots};
use slotpool::{Capacity, TryAcquireError};

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
/// drains), and no capacity is lost.
#[test]
fn client_reap_vs_acquire() {
    loom::model(|| {
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
        let reaped = slots.reap(|stamp| stamp == 0);
        let acquired = acquirer.join().unwrap();
        match (acquired, reaped.as_slice()) {
            // The acquirer won; the reaper's CAS failed (or it saw the fresh stamp 1).
            (Some(7), []) => assert_eq!(slots.state(0), Some(CellState::Idle)),
            // The reaper won; the acquirer never had the client.
            (None, [(7, 0)]) => assert_eq!(slots.state(0), Some(CellState::Empty)),
            other => panic!("client handed out twice or lost: {other:?}"),
        }
        // No capacity leaked: the one slot can be taken again.
        assert!(slots.try_checkout().is_ok());
    });
}

/// Two callers race for a one-client pool (checkout waits on the gate): each gets the client
/// in turn, never both at once, and the client is never lost or duplicated.
#[test]
fn released_client_is_never_handed_to_two_callers() {
    loom::model(|| {
        let slots = Arc::new(one_idle_client(7));
        let holders = Arc::new(AtomicUsize::new(0));
        let caller = |slots: Arc<ExclusiveSlots<u32>>, holders: Arc<AtomicUsize>, stamp: u64| {
            let checkout = block_on(slots.checkout()).unwrap();
            let Checkout::Idle { lease, value } = checkout else {
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
        };
        let other = {
            let (slots, holders) = (Arc::clone(&slots), Arc::clone(&holders));
            thread::spawn(move || caller(slots, holders, 1))
        };
        caller(Arc::clone(&slots), Arc::clone(&holders), 2);
        other.join().unwrap();
        let counts = slots.counts();
        assert_eq!(
            (counts.live, counts.idle, counts.table.in_flight),
            (1, 1, 0)
        );
    });
}

/// A reap racing the return of a client that was taken while its idle word still said
/// `Idle(0)` (expired): the reaper may win the idle word while the client is out, but must see
/// the holder and give the word back, or fail against the fresh stamp. It never takes the
/// client, and the client ends idle with its new stamp.
#[test]
fn client_reap_vs_check_in() {
    loom::model(|| {
        let slots = Arc::new(one_idle_client(7));
        let Ok(Checkout::Idle { lease, value }) = slots.try_checkout() else {
            panic!("the idle client is taken");
        };
        let holder = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                assert!(matches!(slots.check_in(lease, value + 1, 5), CheckIn::Kept));
            })
        };
        let reaped = slots.reap(|stamp| stamp == 0);
        holder.join().unwrap();
        assert!(reaped.is_empty(), "reaped a client in use: {reaped:?}");
        assert_eq!(slots.state(0), Some(CellState::Idle));
        let Ok(Checkout::Idle { lease, value }) = slots.try_checkout() else {
            panic!("the returned client is idle");
        };
        assert_eq!(value, 8);
        assert!(matches!(slots.check_in(lease, value, 6), CheckIn::Kept));
        // Now expired by the predicate: the next pass takes it.
        assert_eq!(slots.reap(|stamp| stamp == 6).len(), 1);
    });
}

/// `close` racing a check-in: the returned value never stays stranded in the closed table.
/// Either the check-in sees the close first and hands the value back (`Surplus`), or close's
/// pass takes it, or the check-in sees the close after its release and runs the closing pass
/// itself (`Trimmed`).
#[test]
fn close_vs_check_in_strands_nothing() {
    loom::model(|| {
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
        assert_eq!(slots.counts().live, 0);
        assert_eq!(slots.live(), 0, "the live count is exact");
    });
}

/// A reap racing a join on one idle channel: a joiner that registers keeps the channel (the
/// reaper's CAS fails); if the reaper wins, the joiner never gets the reaped channel (it opens
/// a new one in the emptied slot or the next).
#[test]
fn channel_reap_vs_join() {
    loom::model(|| {
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
        let reaped = slots.reap(|stamp| stamp == 0);
        let (got, index, share) = joiner.join().unwrap();
        let reaped: Vec<(usize, u32)> = reaped.iter().map(|(i, inc)| (*i, *inc.value())).collect();
        match (got, reaped.as_slice()) {
            (7, []) => {}
            (8, [(0, 7)]) => {}
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
}

/// Two joiners on an empty table with room for two: one claims and opens the channel, the
/// other joins the Starting slot and waits for the publication; both share one channel.
#[test]
fn channel_join_waits_for_the_claimers_publication() {
    loom::model(|| {
        let slots = Arc::new(SharedSlots::<u32>::new(2).unwrap());
        let get = |slots: &SharedSlots<u32>| match slots.join() {
            Joined::Shared(share) => share,
            Joined::Vacant(lease) => slots.open(lease, 7),
        };
        let other = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let share = get(&slots);
                (share.index(), *share.value(), share)
            })
        };
        let mine = get(&slots);
        let (index, value, theirs) = other.join().unwrap();
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
}
