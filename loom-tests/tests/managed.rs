#![cfg(slotpool_loom)]
//! Loom models of the protocol under the managed pool (`slotpool::managed::Pool`): the
//! exclusive cell (`slotpool::__internal::exclusive::ExclusiveSlots`) with its lazy room hints, its
//! resizable live count, hand-overs to waiters and the reaper's handshake. The tokio pool is
//! compiled out under loom; everything it does to slots (checkout, wait, return, retire,
//! resize, retain, reap, close) is one of the calls modelled here, on the real code.
//!
//! Each model counts, across its executions, that the path it is named for ran at least once
//! (and that loom explored more than one execution), so a model cannot pass by never reaching
//! its race.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --test managed --target-dir target/loom`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use loom::future::block_on;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use slotpool::__internal::exclusive::{CheckIn, Checkout, ExclusiveSlots, IdleStamps, Reuse};
use slotpool::__internal::slots::Capacity;
use slotpool::{Closed, TryAcquireError};
use slotpool_loom_tests::model;

fn poll_once<F: Future>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// A future that counts how often it returned `Pending` (to tell whether a checkout waited).
struct CountPending<F> {
    inner: F,
    pending: usize,
}

impl<F: Future + Unpin> Future for CountPending<F> {
    type Output = (F::Output, usize);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.inner).poll(cx) {
            Poll::Ready(output) => Poll::Ready((output, self.pending)),
            Poll::Pending => {
                self.pending += 1;
                Poll::Pending
            }
        }
    }
}

/// Spawns a thread that waits for a checkout and gives it to `then`, with whether it had to
/// wait (returned `Pending` at least once).
fn spawn_waiter<R: Send + 'static>(
    slots: &Arc<ExclusiveSlots<u32>>,
    then: impl FnOnce(&ExclusiveSlots<u32>, Result<Checkout<u32>, Closed>, bool) -> R + Send + 'static,
) -> thread::JoinHandle<R> {
    let slots = Arc::clone(slots);
    thread::spawn(move || {
        let (checkout, pending) = block_on(CountPending {
            inner: Box::pin(slots.checkout()),
            pending: 0,
        });
        then(&slots, checkout, pending > 0)
    })
}

/// A table of `size` slots holding `values` idle, in slots 0, 1, … (idle stamp 0, born 0).
fn idle_values(size: usize, values: &[u32]) -> ExclusiveSlots<u32> {
    idle_values_in_order(size, values, Reuse::Lowest)
}

/// [`idle_values`] with the given reuse order.
fn idle_values_in_order(size: usize, values: &[u32], reuse: Reuse) -> ExclusiveSlots<u32> {
    let slots = ExclusiveSlots::with_reuse(Capacity::Bounded(size), reuse).unwrap();
    let leases: Vec<_> = values
        .iter()
        .map(|_| match slots.try_checkout() {
            Ok(Checkout::Vacant { lease }) => lease,
            other => panic!("an empty table claims, got {other:?}"),
        })
        .collect();
    for (lease, &value) in leases.into_iter().zip(values) {
        slots.occupy_born(&lease, 0);
        assert!(matches!(slots.check_in(lease, value, 0), CheckIn::Kept));
    }
    assert_eq!(slots.live(), values.len());
    slots
}

/// Takes the idle value of the lowest slot.
fn take(slots: &ExclusiveSlots<u32>) -> (slotpool::__internal::exclusive::Lease, u32) {
    match slots.try_checkout() {
        Ok(Checkout::Idle { lease, value }) => (lease, value),
        other => panic!("an idle value, got {other:?}"),
    }
}

/// Returns a held value on a new thread; the flag is raised once it is back.
fn return_on_a_thread(
    slots: &Arc<ExclusiveSlots<u32>>,
    lease: slotpool::__internal::exclusive::Lease,
    value: u32,
) -> (thread::JoinHandle<()>, Arc<AtomicBool>) {
    let returned = Arc::new(AtomicBool::new(false));
    let releaser = {
        let (slots, returned) = (Arc::clone(slots), Arc::clone(&returned));
        thread::spawn(move || {
            assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
            returned.store(true, Ordering::SeqCst);
        })
    };
    (releaser, returned)
}

/// Whether the return already happened and handed the slot over: while a waiter is queued, a
/// return can only hand the slot to it (the unit stays in flight).
fn handed_over(slots: &ExclusiveSlots<u32>, returned: &AtomicBool) -> bool {
    returned.load(Ordering::SeqCst) && slots.counts().table.in_flight == 1
}

/// After a model: nothing held, nothing waiting, and the live count is what the slots show.
fn assert_settled(slots: &ExclusiveSlots<u32>) {
    let counts = slots.counts();
    assert_eq!(
        counts.table.in_flight, 0,
        "a unit is still held: {counts:?}"
    );
    assert_eq!(
        counts.table.waiting, 0,
        "a waiter is still queued: {counts:?}"
    );
    assert_eq!(
        counts.live,
        slots.live(),
        "the live count drifted: {counts:?}"
    );
    assert_eq!(counts.idle, counts.live, "a value is neither idle nor gone");
}

/// A checkout that waits, polled once and dropped, racing the return of the only value (the
/// table's lazy room bit of the returned slot is still set from the checkout). Whether the
/// return found the waiter queued (and handed the slot over) or not, the value ends idle in
/// its slot and the next checkout gets it: the cancelled waiter took nothing.
#[test]
fn get_cancelled_after_one_poll_while_waiting() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let (lease, value) = take(&slots);
        let mut wait = Box::pin(slots.checkout());
        assert!(
            poll_once(wait.as_mut()).is_pending(),
            "the only value is held"
        );
        let (releaser, returned) = return_on_a_thread(&slots, lease, value);
        if handed_over(&slots, &returned) {
            reach.hit("handed then dropped");
        } else {
            reach.hit("dropped first");
        }
        drop(wait);
        releaser.join().unwrap();
        assert_settled(&slots);
        let (lease, value) = take(&slots);
        assert_eq!(value, 7, "the value survived the cancelled waiter");
        assert!(matches!(slots.check_in(lease, value, 3), CheckIn::Kept));
    });
    reach
        .explored(2)
        .reached_all(&["handed then dropped", "dropped first"]);
}

/// A hand-over to a waiter that is cancelled at that moment goes to the next waiter: the first
/// waiter is queued and then dropped while the only value comes back and a second waiter
/// queues behind it; the second gets the value (loom reports a deadlock if the hand-over is
/// swallowed by the dropped waiter).
#[test]
fn handoff_to_a_cancelled_waiter_goes_to_the_next() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let (lease, value) = take(&slots);
        let mut first = Box::pin(slots.checkout());
        assert!(
            poll_once(first.as_mut()).is_pending(),
            "the only value is held"
        );
        let (releaser, returned) = return_on_a_thread(&slots, lease, value);
        let second = spawn_waiter(&slots, |slots, checkout, _| {
            let Ok(Checkout::Idle { lease, value }) = checkout else {
                panic!("the second waiter gets the value, got {checkout:?}");
            };
            assert_eq!(value, 7);
            assert!(matches!(slots.check_in(lease, value, 2), CheckIn::Kept));
        });
        if handed_over(&slots, &returned) {
            reach.hit("handed then dropped");
        }
        drop(first);
        releaser.join().unwrap();
        second.join().unwrap();
        assert_settled(&slots);
        assert_eq!(slots.counts().idle, 1);
    });
    reach.explored(2).reached_all(&["handed then dropped"]);
}

/// A return racing a waiter's scan over the returned slot's stale room bit (lazy hints: the
/// checkout left it set). The waiter clears the stale bit and rechecks the slot; the return
/// sets the bit only if it finds it clear. Either way the waiter gets the value (loom reports
/// a deadlock for a lost wake-up).
#[test]
fn return_vs_waiter_over_a_stale_room_bit() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let (lease, value) = take(&slots);
        let seen = reach.clone();
        let waiter = spawn_waiter(&slots, move |slots, checkout, waited| {
            if waited {
                seen.hit("waited");
            } else {
                seen.hit("no wait");
            }
            let Ok(Checkout::Idle { lease, value }) = checkout else {
                panic!("the waiter gets the value, got {checkout:?}");
            };
            assert!(matches!(slots.check_in(lease, value, 2), CheckIn::Kept));
        });
        assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
        waiter.join().unwrap();
        assert_settled(&slots);
    });
    reach.explored(2).reached_all(&["waited", "no wait"]);
}

/// `resize(1)` racing the return of one of two values (the other idle). Shrinking retires the
/// idle value at once or the returning one on its way back, never both and never none: the
/// table ends with exactly one value, and every value is either idle or retired exactly once.
/// The return that releases before the shrink's pass yet sees the shrink after its release
/// runs the trimming pass itself (the Dekker pairing of the bound and the slot words).
#[test]
fn resize_vs_return() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(2, &[1, 2]));
        let (lease, value) = take(&slots);
        assert_eq!(value, 1, "lowest slot first");
        let resizer = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || slots.resize(1).unwrap().into_iter().collect::<Vec<_>>())
        };
        let mut retired = match slots.check_in(lease, value, 1) {
            CheckIn::Kept => Vec::new(),
            CheckIn::Surplus(values) => {
                reach.hit("surplus");
                values.into_iter().collect()
            }
            CheckIn::Trimmed(values) => {
                reach.hit("trimmed on return");
                values.into_iter().collect()
            }
        };
        let by_resize = resizer.join().unwrap();
        if !by_resize.is_empty() {
            reach.hit("retired by resize");
        }
        retired.extend(by_resize);
        assert_eq!(
            retired.len(),
            1,
            "shrinking to 1 retires one value: {retired:?}"
        );
        assert_settled(&slots);
        assert_eq!((slots.live(), slots.size()), (1, Some(1)));
        let (lease, left) = take(&slots);
        retired.push(left);
        retired.sort_unstable();
        assert_eq!(retired, [1, 2], "a value was lost or retired twice");
        assert!(matches!(slots.check_in(lease, left, 3), CheckIn::Kept));
    });
    reach
        .explored(2)
        .reached_all(&["surplus", "trimmed on return", "retired by resize"]);
}

/// A shrink's trim racing a return and a checkout: size 2, value 1 held, value 2 idle, then
/// `resize(1)`. If the return sheds its own value (the bound asked for one retirement and the
/// return made it), value 2 was idle before and after, so the checkout cannot be refused. It
/// was, when the trim took value 2 out before claiming the surplus and put it back once the
/// return had met the bound: in between the checkout found nothing idle and no room.
/// Reached: the return shedding its value, and a refusal where one is right (the trim took
/// value 2 for good while value 1 was still out).
#[test]
fn trim_vs_return_keeps_the_idle_value_visible() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(2, &[1, 2]));
        let (held, one) = take(&slots);
        let resizer = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || slots.resize(1).unwrap().into_iter().collect::<Vec<_>>())
        };
        let returner = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || match slots.check_in(held, one, 1) {
                CheckIn::Kept => false,
                CheckIn::Surplus(values) => {
                    assert_eq!(*values, [1]);
                    true
                }
                // It ran the trim pass itself: shed if its own value is among those retired.
                CheckIn::Trimmed(values) => values.contains(&1),
            })
        };
        let refused = match slots.try_checkout() {
            Ok(Checkout::Idle { lease, value }) => {
                if let CheckIn::Surplus(_) = slots.check_in(lease, value, 2) {
                    reach.hit("shed on the checkout's return");
                }
                false
            }
            Err(TryAcquireError::NoCapacity) => true,
            other => panic!("unexpected {other:?}"),
        };
        let shed = returner.join().unwrap();
        let _trimmed = resizer.join().unwrap();
        if shed {
            reach.hit("the return shed its value");
            assert!(!refused, "refused while value 2 was idle before and after");
        } else if refused {
            reach.hit("refused while the trim held value 2");
        }
        assert_settled(&slots);
        assert_eq!(slots.live(), 1);
    });
    reach.explored(2).reached_all(&[
        "the return shed its value",
        "refused while the trim held value 2",
    ]);
}

/// `resize(1)` racing a checkout that opens a new slot (the only value is held, the size is
/// 2): the checkout is refused (it read the new size), or it builds a value that the shrink
/// retires, either on its way back (`Surplus`) or from idle; never both values stay, never
/// more are retired than the shrink asks for, and the live count stays exact.
#[test]
fn resize_vs_checkout() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(2, &[1]));
        let (held, one) = take(&slots);
        let resizer = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || slots.resize(1).unwrap().into_iter().collect::<Vec<_>>())
        };
        let mut retired = Vec::new();
        match slots.try_checkout() {
            Ok(Checkout::Vacant { lease }) => {
                slots.occupy(&lease);
                match slots.check_in(lease, 2, 1) {
                    CheckIn::Kept => {}
                    CheckIn::Surplus(values) => {
                        reach.hit("new shed on return");
                        retired.extend(values);
                    }
                    CheckIn::Trimmed(values) => retired.extend(values),
                }
            }
            Err(TryAcquireError::NoCapacity) => reach.hit("refused"),
            other => panic!("unexpected {other:?}"),
        }
        let by_resize = resizer.join().unwrap();
        if by_resize.contains(&2) {
            reach.hit("new retired by resize");
        }
        retired.extend(by_resize);
        assert!(matches!(slots.check_in(held, one, 2), CheckIn::Kept));
        assert!(
            retired.len() <= 1,
            "retired more than the shrink asked: {retired:?}"
        );
        assert_settled(&slots);
        assert_eq!(slots.live(), 1, "one value left: {retired:?}");
    });
    reach
        .explored(2)
        .reached_all(&["refused", "new shed on return", "new retired by resize"]);
}

/// `resize` growing the table while a caller waits for room to build: the waiter is woken by
/// the resize (or sees the new bound in its recheck) and claims a slot.
#[test]
fn resize_up_wakes_a_waiter() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let (lease, value) = take(&slots);
        let seen = reach.clone();
        let waiter = spawn_waiter(&slots, move |slots, checkout, waited| {
            if waited {
                seen.hit("waited");
            }
            match checkout {
                Ok(Checkout::Vacant { lease }) => {
                    slots.occupy(&lease);
                    assert!(matches!(slots.check_in(lease, 8, 2), CheckIn::Kept));
                }
                other => panic!("the waiter builds in the new room, got {other:?}"),
            }
        });
        assert!(slots.resize(2).unwrap().is_empty());
        waiter.join().unwrap();
        assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
        assert_settled(&slots);
        assert_eq!(slots.live(), 2);
    });
    reach.explored(2).reached_all(&["waited"]);
}

/// `close` racing a waiter (the only value is held): the waiter wakes with `Closed`, never
/// sleeps through the close; the held value comes back as surplus and the table ends empty.
#[test]
fn close_vs_waiters() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let (lease, value) = take(&slots);
        let seen = reach.clone();
        let waiter = spawn_waiter(&slots, move |_, checkout, waited| {
            if waited {
                seen.hit("waited");
            }
            assert!(matches!(checkout, Err(Closed)), "got {checkout:?}");
        });
        slots.close();
        assert!(slots.reap(|_| true).is_empty(), "nothing was idle");
        waiter.join().unwrap();
        assert!(matches!(
            slots.check_in(lease, value, 1),
            CheckIn::Surplus(values) if *values == [7]
        ));
        assert_settled(&slots);
        assert_eq!(slots.live(), 0);
        assert!(matches!(slots.try_checkout(), Err(TryAcquireError::Closed)));
    });
    reach.explored(2).reached_all(&["waited"]);
}

/// The reaper retiring a value past its lifetime (by its birth stamp) racing a checkout of
/// it: exactly one of them gets the value. If the reaper won, the checkout builds a new value
/// in the freed room (or finds none yet while the slot drains); the live count stays exact.
#[test]
fn reap_vs_checkout() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let acquirer = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || match slots.try_checkout() {
                Ok(Checkout::Idle { lease, value }) => {
                    assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
                    Some(value)
                }
                Ok(Checkout::Vacant { lease }) => {
                    slots.occupy_born(&lease, 5);
                    assert!(matches!(slots.check_in(lease, 8, 1), CheckIn::Kept));
                    Some(8)
                }
                Err(TryAcquireError::NoCapacity) => None,
                Err(e) => panic!("unexpected {e:?}"),
            })
        };
        let reaped = slots.reap_by(|stamps: IdleStamps| stamps.born == 0);
        let acquired = acquirer.join().unwrap();
        match (acquired, reaped.as_slice()) {
            (Some(7), []) => reach.hit("checked out"),
            (Some(8) | None, [(7, 0)]) => reach.hit("reaped"),
            other => panic!("a value was handed out twice or lost: {other:?}"),
        }
        drop(reaped); // closed: their units of the bound go back
        assert_settled(&slots);
        assert!(slots.live() <= 1);
    });
    reach.explored(2).reached_all(&["reaped", "checked out"]);
}

/// A checkout that loses the lowest idle value to the reaper (the reaper won the idle word and
/// is about to drain the slot) takes the next idle value: the lost slot stays the lowest with
/// room until the drain, and a search that met it on every retry would give up, with the
/// other value idle beside it, if the reaper were preempted before its drain. Here the
/// checkout must never come back empty-handed: the value in slot 1 is idle throughout.
/// Reached: the reaper's win followed by the checkout of slot 1's value, and the checkout of
/// slot 0's value before the reap.
#[test]
fn lost_to_the_reaper_takes_the_next_idle_value() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(2, &[7, 9]));
        let acquirer = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || match slots.try_checkout() {
                Ok(Checkout::Idle { lease, value }) => {
                    assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
                    value
                }
                other => panic!("slot 1's value was idle throughout, got {other:?}"),
            })
        };
        let reaped = slots.reap_by(|stamps: IdleStamps| stamps.index == 0);
        let acquired = acquirer.join().unwrap();
        match (acquired, reaped.as_slice()) {
            (7, []) => reach.hit("took slot 0's value first"),
            (9, [(7, 0)]) => reach.hit("took slot 1's value past the reaped slot"),
            other => panic!("a value was handed out twice or lost: {other:?}"),
        }
        drop(reaped); // closed: their units of the bound go back
        assert_settled(&slots);
    });
    reach.explored(2).reached_all(&[
        "took slot 0's value first",
        "took slot 1's value past the reaped slot",
    ]);
}

/// `retain` racing a checkout: `retain` takes each idle value by joining its slot, so the
/// checkout either gets the value first (retain skips it) or finds it held and builds
/// nothing extra beyond the bound; a value `retain` drops is retired once.
#[test]
fn retain_vs_checkout() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let acquirer = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || match slots.try_checkout() {
                Ok(Checkout::Idle { lease, value }) => {
                    assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
                    Some(value)
                }
                Ok(Checkout::Vacant { lease }) => {
                    slots.occupy(&lease);
                    assert!(matches!(slots.check_in(lease, 8, 1), CheckIn::Kept));
                    Some(8)
                }
                Err(TryAcquireError::NoCapacity) => None,
                Err(e) => panic!("unexpected {e:?}"),
            })
        };
        let removed = slots.retain(|value| *value != 7);
        let acquired = acquirer.join().unwrap();
        match (acquired, removed.as_slice()) {
            (Some(7), []) => reach.hit("checkout first"),
            (Some(7), [7]) => {} // checked out and returned before retain looked
            (Some(8) | None, [7]) => reach.hit("retained dropped"),
            other => panic!("a value was handed out twice or lost: {other:?}"),
        }
        drop(removed); // closed: their units of the bound go back
        assert_settled(&slots);
        assert!(slots.live() <= 1);
    });
    reach
        .explored(2)
        .reached_all(&["retained dropped", "checkout first"]);
}

/// What a model knows of the values that exist: raised by a build, lowered by the owner's
/// close of a retired value. A build that finds another value still alive in a table of size
/// 1 is an overshoot of the bound.
fn built_alone(alive: &loom::sync::atomic::AtomicUsize) {
    let before = alive.fetch_add(1, Ordering::SeqCst);
    assert_eq!(before, 0, "a value was built while another still existed");
}

/// Takes a value or builds one (size-1 table), counting a build in `alive`; `None` when the
/// table had no room. The value goes back before it returns.
fn try_take_or_build(
    slots: &ExclusiveSlots<u32>,
    alive: &loom::sync::atomic::AtomicUsize,
) -> Option<bool> {
    match slots.try_checkout() {
        Ok(Checkout::Idle { lease, value }) => {
            assert!(matches!(slots.check_in(lease, value, 2), CheckIn::Kept));
            Some(false)
        }
        Ok(Checkout::Vacant { lease }) => {
            built_alone(alive);
            slots.occupy(&lease);
            assert!(matches!(slots.check_in(lease, 8, 2), CheckIn::Kept));
            Some(true)
        }
        Err(TryAcquireError::NoCapacity) => None,
        Err(e) => panic!("unexpected {e:?}"),
    }
}

/// A discarded value counts against the bound until its owner has closed it: size 1, value 7
/// held and discarded (`retire_value`) while another thread tries for a value. The try may
/// build only once the owner's close is over (the `Retired` dropped); during the close it is
/// refused. Giving the room back at retirement (before the close) lets it build a second
/// value beside the one still closing.
/// Reached: a build after the close, and a refusal during it.
#[test]
fn a_discarded_value_counts_until_closed() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let alive = Arc::new(loom::sync::atomic::AtomicUsize::new(1));
        let closing = Arc::new(AtomicBool::new(false));
        let (lease, value) = take(&slots);
        let other = {
            let (slots, alive, closing) =
                (Arc::clone(&slots), Arc::clone(&alive), Arc::clone(&closing));
            thread::spawn(move || {
                let got = try_take_or_build(&slots, &alive);
                (got, closing.load(Ordering::SeqCst))
            })
        };
        let retired = slots.retire_value(lease, value);
        assert_eq!(*retired, [7]);
        closing.store(true, Ordering::SeqCst);
        // The owner's close: the value is gone, then its unit goes back.
        alive.fetch_sub(1, Ordering::SeqCst);
        closing.store(false, Ordering::SeqCst);
        drop(retired);
        match other.join().unwrap() {
            (Some(true), _) => reach.hit("built after the close"),
            (Some(false), _) => panic!("took a value that was held or retired"),
            (None, during) => {
                reach.hit_if(during, "refused during the close");
            }
        }
        assert_settled(&slots);
        assert_eq!(slots.closing(), 0);
    });
    reach
        .explored(2)
        .reached_all(&["built after the close", "refused during the close"]);
}

/// A waiter for room is woken by the end of a close: size 1, value 7 held; one thread waits
/// for a checkout while the holder discards the value and closes it. The waiter builds only
/// after the close, and is never left asleep (a close that ends without a wake-up: loom
/// reports the deadlock).
/// Reached: the waiter slept and was woken by the close's end.
#[test]
fn the_end_of_a_close_wakes_a_waiter() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let alive = Arc::new(loom::sync::atomic::AtomicUsize::new(1));
        let (lease, value) = take(&slots);
        let waiter = {
            let alive = Arc::clone(&alive);
            spawn_waiter(&slots, move |slots, checkout, waited| {
                match checkout {
                    Ok(Checkout::Vacant { lease }) => {
                        built_alone(&alive);
                        slots.occupy(&lease);
                        assert!(matches!(slots.check_in(lease, 8, 2), CheckIn::Kept));
                    }
                    other => panic!("a build was due, got {other:?}"),
                }
                waited
            })
        };
        let retired = slots.retire_value(lease, value);
        alive.fetch_sub(1, Ordering::SeqCst);
        drop(retired);
        let waited = waiter.join().unwrap();
        reach.hit_if(waited, "woken by the close's end");
        assert_settled(&slots);
    });
    reach.explored(2).reached("woken by the close's end");
}

/// A reaped value counts until the reaper's owner has closed it: size 1, value 7 idle; a
/// reaper pass races a try. The try takes the value (the reaper then finds nothing), or is
/// refused while the reaped value is closing, or builds after the close.
/// Reached: all three.
#[test]
fn a_reaped_value_counts_until_closed() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let alive = Arc::new(loom::sync::atomic::AtomicUsize::new(1));
        let other = {
            let (slots, alive) = (Arc::clone(&slots), Arc::clone(&alive));
            thread::spawn(move || try_take_or_build(&slots, &alive))
        };
        let reaped = slots.reap(|_| true);
        let count = reaped.len();
        if count == 1 {
            alive.fetch_sub(1, Ordering::SeqCst);
        }
        drop(reaped);
        match (other.join().unwrap(), count) {
            (Some(false), 0) => reach.hit("taken before the reap"),
            (Some(false), 1) => {} // taken and returned before the reaper looked
            (Some(true), 1) => reach.hit("built after the close"),
            (None, 1) => reach.hit("refused during the close"),
            other => panic!("a value was lost or built beside another: {other:?}"),
        }
        assert_settled(&slots);
    });
    reach.explored(2).reached_all(&[
        "taken before the reap",
        "built after the close",
        "refused during the close",
    ]);
}

/// A shrink grown back at once does not free the room of a surplus value still closing:
/// size 1, value 7 held; the table is shrunk to 0, then the holder returns the value (its
/// surplus) while another thread grows the table back to 1 and tries. The try builds only
/// after the surplus value's close.
/// Reached: a build after the close, and a refusal during it.
#[test]
fn a_surplus_value_counts_until_closed_across_a_regrowth() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let alive = Arc::new(loom::sync::atomic::AtomicUsize::new(1));
        let closing = Arc::new(AtomicBool::new(false));
        let (lease, value) = take(&slots);
        assert!(
            slots.resize(0).unwrap().is_empty(),
            "nothing idle to retire"
        );
        let other = {
            let (slots, alive, closing) =
                (Arc::clone(&slots), Arc::clone(&alive), Arc::clone(&closing));
            thread::spawn(move || {
                assert!(slots.resize(1).unwrap().is_empty());
                let got = try_take_or_build(&slots, &alive);
                (got, closing.load(Ordering::SeqCst))
            })
        };
        match slots.check_in(lease, value, 1) {
            CheckIn::Surplus(retired) => {
                assert_eq!(*retired, [7]);
                closing.store(true, Ordering::SeqCst);
                alive.fetch_sub(1, Ordering::SeqCst);
                closing.store(false, Ordering::SeqCst);
                drop(retired);
            }
            // Grown back first: the value stays.
            CheckIn::Kept => {}
            CheckIn::Trimmed(retired) => panic!("nothing else was idle: {retired:?}"),
        }
        match other.join().unwrap() {
            (Some(true), _) => reach.hit("built after the close"),
            (Some(false), _) => {}
            (None, during) => {
                reach.hit_if(during, "refused during the close");
            }
        }
        assert_settled(&slots);
    });
    reach
        .explored(2)
        .reached_all(&["built after the close", "refused during the close"]);
}

// --- the bound with three parties -------------------------------------------------------

/// Raises the count of values that exist for a build in a table of size `size`, asserting
/// the build did not overshoot it.
fn built_within(alive: &loom::sync::atomic::AtomicUsize, size: usize) {
    let before = alive.fetch_add(1, Ordering::SeqCst);
    assert!(
        before < size,
        "a value was built while {before} already existed in a table of size {size}"
    );
}

/// Tries for a value (size-`size` table), counting a build in `alive`, and keeps what it got
/// in its slot. True if it built one.
fn try_build_and_keep(
    slots: &ExclusiveSlots<u32>,
    alive: &loom::sync::atomic::AtomicUsize,
    size: usize,
) -> bool {
    match slots.try_checkout() {
        Ok(Checkout::Idle { lease, value }) => {
            assert!(matches!(slots.check_in(lease, value, 2), CheckIn::Kept));
            false
        }
        Ok(Checkout::Vacant { lease }) => {
            built_within(alive, size);
            slots.occupy(&lease);
            assert!(matches!(slots.check_in(lease, 8, 2), CheckIn::Kept));
            true
        }
        Err(TryAcquireError::NoCapacity) => false,
        Err(e) => panic!("unexpected {e:?}"),
    }
}

/// The bound is read from two counts (`live`, `closing`), so it takes three parties to break:
/// size 2, value 7 held; two openers try for a value while the holder discards 7 and closes
/// it. An opener that read the counts before the other opener's unit and the discard (live
/// 1, closing 0), and whose unit lands after both, must not find room: 7 still exists
/// (closing), and so does the other opener's value. Two openers and no discard, or one opener
/// and the discard, cannot tell a check of `live` and `closing` read apart from one read of
/// both; only the third party can.
/// Reached: both openers built (one after the close), and one refused while 7 was closing.
#[test]
fn two_openers_and_a_discard_never_exceed_the_bound() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(2, &[7]));
        let alive = Arc::new(loom::sync::atomic::AtomicUsize::new(1));
        let closing = Arc::new(AtomicBool::new(false));
        let (lease, value) = take(&slots);
        // The discard first and this thread's try last, so that the overshoot takes two
        // preemptions (this thread after reading the counts, the holder between the discard
        // and the close), within CI's bound of 3.
        let holder = {
            let (slots, alive, closing) =
                (Arc::clone(&slots), Arc::clone(&alive), Arc::clone(&closing));
            thread::spawn(move || {
                let retired = slots.retire_value(lease, value);
                closing.store(true, Ordering::SeqCst);
                alive.fetch_sub(1, Ordering::SeqCst);
                closing.store(false, Ordering::SeqCst);
                drop(retired);
            })
        };
        let other = {
            let (slots, alive, closing) =
                (Arc::clone(&slots), Arc::clone(&alive), Arc::clone(&closing));
            thread::spawn(move || {
                let built = try_build_and_keep(&slots, &alive, 2);
                (built, closing.load(Ordering::SeqCst))
            })
        };
        let built = try_build_and_keep(&slots, &alive, 2);
        let ours = (built, closing.load(Ordering::SeqCst));
        holder.join().unwrap();
        let theirs = other.join().unwrap();
        reach.hit_if(ours.0 && theirs.0, "both openers built");
        reach.hit_if(
            (!ours.0 && ours.1) || (!theirs.0 && theirs.1),
            "an opener refused while 7 was closing",
        );
        assert_eq!(slots.closing(), 0);
        assert!(slots.live() <= 2, "{} values for a size of 2", slots.live());
        assert_settled(&slots);
    });
    reach.explored(2).reached_all(&[
        "both openers built",
        "an opener refused while 7 was closing",
    ]);
}

/// The values a check-in gave back to its caller (surplus, or retired by its trimming pass).
fn checked_in_out(check_in: CheckIn<'_, u32>) -> Vec<u32> {
    match check_in {
        CheckIn::Kept => Vec::new(),
        CheckIn::Surplus(values) | CheckIn::Trimmed(values) => values.into_iter().collect(),
    }
}

/// A return racing a waiter and a close, three parties: size 1, value 7 held; a waiter queues
/// for it, the holder returns it (handing it to the waiter if it is queued), and the table
/// closes. However they interleave, the waiter ends (with 7, or with `Closed`), 7 comes out
/// exactly once (from a return, or from the closing pass), and no unit stays held. The case
/// that needs all three: the return hands the slot to the waiter after the waiter queued and
/// before it looked at the gate again, and the close lands in between, so the waiter answers
/// `Closed` holding a unit it did not use and must give it back; without the close the waiter
/// takes the value, and without the return there is nothing to give back.
/// Reached: the waiter got 7, and the waiter closed out.
#[test]
fn a_return_a_waiter_and_a_close_lose_no_value_and_no_unit() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let (lease, value) = take(&slots);
        let waiter = spawn_waiter(&slots, move |slots, checkout, _| match checkout {
            Ok(Checkout::Idle { lease, value }) => {
                assert_eq!(value, 7);
                (true, checked_in_out(slots.check_in(lease, value, 2)))
            }
            Ok(other) => panic!("a vacant slot while 7 exists: {other:?}"),
            Err(Closed) => (false, Vec::new()),
        });
        let holder = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || checked_in_out(slots.check_in(lease, value, 1)))
        };
        slots.close();
        let returned = holder.join().unwrap();
        let (got, given_back) = waiter.join().unwrap();
        let closing_pass: Vec<u32> = slots.reap(|_| true).into_iter().map(|(v, _)| v).collect();
        let out: Vec<u32> = [returned, given_back, closing_pass].concat();
        assert_eq!(out, [7], "7 must come out exactly once (got 7: {got})");
        reach.hit_if(got, "the waiter got 7");
        reach.hit_if(!got, "the waiter closed out");
        assert_settled(&slots);
        assert_eq!(slots.live(), 0);
    });
    reach
        .explored(2)
        .reached_all(&["the waiter got 7", "the waiter closed out"]);
}

// --- holder notes (held-too-long detection) ------------------------------------------------

/// A watchdog pass on its own thread: the reports it made, as `(slot, since, tag)`.
fn watchdog(slots: &Arc<ExclusiveSlots<u32>>) -> thread::JoinHandle<Vec<(usize, u64, usize)>> {
    let slots = Arc::clone(slots);
    thread::spawn(move || {
        let mut reports = Vec::new();
        slots.report_holds(u64::MAX >> 2, |slot, since, tag| {
            reports.push((slot, since, tag))
        });
        reports
    })
}

/// A noted hold is reported at most once, by whichever of two watchdog passes marks it first,
/// and its holder, ending the note as it gives the value back, learns whether it was: three
/// parties (two passes and the holder). A pass that marked with a plain store instead of a
/// CAS reports twice, or marks a note the holder already ended.
/// Reached: reported by one pass before the end, and ended unreported.
#[test]
fn a_hold_is_reported_at_most_once_and_its_holder_knows() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values(1, &[7]));
        let (lease, value) = take(&slots);
        slots.note_hold(&lease, 5, 42);
        let (first, second) = (watchdog(&slots), watchdog(&slots));
        let note = slots.end_hold(&lease).expect("the holder noted its hold");
        assert!(matches!(slots.check_in(lease, value, 6), CheckIn::Kept));
        let reports: Vec<_> = [first.join().unwrap(), second.join().unwrap()].concat();
        assert!(reports.len() <= 1, "reported more than once: {reports:?}");
        assert_eq!(
            note.reported,
            reports.len() == 1,
            "the holder's view ({note:?}) and the reports ({reports:?}) disagree"
        );
        if let Some(&report) = reports.first() {
            assert_eq!(report, (0, 5, 42), "the report is of the noted hold");
        }
        assert_eq!((note.since, note.tag), (5, 42));
        reach.hit_if(note.reported, "reported before the end");
        reach.hit_if(!note.reported, "ended unreported");
        // Nothing is noted any more: a later pass reports nothing.
        let mut late = 0;
        slots.report_holds(u64::MAX >> 2, |_, _, _| late += 1);
        assert_eq!(late, 0, "a report after the end");
        assert_settled(&slots);
    });
    reach
        .explored(2)
        .reached_all(&["reported before the end", "ended unreported"]);
}

// --- rotating reuse (`QueueMode::Fifo`) ----------------------------------------------------

/// A rotating table of `size` slots with `values` idle in slots 0, 1, … and its cursor moved
/// past slot 0 (one checkout and return of slot 0's value before the threads start).
fn rotating_past_slot_0(size: usize, values: &[u32]) -> ExclusiveSlots<u32> {
    let slots = idle_values_in_order(size, values, Reuse::Rotate);
    let (lease, value) = take(&slots);
    assert_eq!(
        (lease.index(), value),
        (0, values[0]),
        "a fresh cursor starts at 0"
    );
    assert!(matches!(slots.check_in(lease, value, 0), CheckIn::Kept));
    slots
}

/// Takes an idle value on a new thread without waiting and hands it (held) to the joiner.
fn take_on_a_thread(
    slots: &Arc<ExclusiveSlots<u32>>,
) -> thread::JoinHandle<(slotpool::__internal::exclusive::Lease, u32)> {
    let slots = Arc::clone(slots);
    thread::spawn(move || match slots.try_checkout() {
        Ok(Checkout::Idle { lease, value }) => (lease, value),
        other => panic!("a value was idle for this caller throughout, got {other:?}"),
    })
}

/// Two rotating checkouts read the same cursor (slot 1) and race for the same slot with the
/// table's CAS: the loser finds it held (a stale room hint: cleared), rescans past the
/// cursor, finds nothing, and wraps around to slot 0. Neither comes back empty-handed and no
/// value goes out twice. Reached: each thread winning slot 1.
#[test]
fn rotating_checkouts_racing_for_the_cursors_slot_take_different_values() {
    let reach = model(|reach| {
        let slots = Arc::new(rotating_past_slot_0(2, &[7, 9]));
        let first = take_on_a_thread(&slots);
        let second = take_on_a_thread(&slots);
        let (a, b) = (first.join().unwrap(), second.join().unwrap());
        // Both held at once: two different values.
        match (a.1, b.1) {
            (9, 7) => reach.hit("the first took the cursor's slot"),
            (7, 9) => reach.hit("the second took the cursor's slot"),
            other => panic!("a value went out twice: {other:?}"),
        }
        for (lease, value) in [a, b] {
            assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
        }
        assert_settled(&slots);
        assert_eq!(slots.live(), 2);
    });
    reach.explored(2).reached_all(&[
        "the first took the cursor's slot",
        "the second took the cursor's slot",
    ]);
}

/// A rotating checkout whose cursor's slot (1) the reaper takes: the checkout either gets
/// slot 1's value first, or loses it and takes slot 0's, idle throughout: it never comes back
/// empty-handed, and the reaped value is retired once.
#[test]
fn rotating_checkout_vs_reap_of_the_cursors_slot() {
    let reach = model(|reach| {
        let slots = Arc::new(rotating_past_slot_0(2, &[7, 9]));
        let acquirer = take_on_a_thread(&slots);
        let reaped = slots.reap_by(|stamps: IdleStamps| stamps.index == 1);
        let (lease, acquired) = acquirer.join().unwrap();
        assert!(matches!(slots.check_in(lease, acquired, 1), CheckIn::Kept));
        match (acquired, reaped.as_slice()) {
            (9, []) => reach.hit("took the cursor's value first"),
            (7, [(9, _)]) => reach.hit("wrapped past the reaped slot"),
            other => panic!("a value was handed out twice or lost: {other:?}"),
        }
        drop(reaped); // closed: its unit of the bound goes back
        assert_settled(&slots);
    });
    reach.explored(2).reached_all(&[
        "took the cursor's value first",
        "wrapped past the reaped slot",
    ]);
}

/// Growth racing a rotating checkout whose cursor stands past the first segment (two slots
/// under loom): a builder claims slot 2 (the table grows a segment) and returns a new value
/// there while the checkout searches from the cursor. The checkout takes the new value if it
/// is back in time, else wraps to slot 0's; every value ends idle in its slot.
#[test]
fn rotating_checkout_vs_growth_past_the_cursor() {
    let reach = model(|reach| {
        let slots = Arc::new(idle_values_in_order(3, &[7, 9], Reuse::Rotate));
        // Cursor past slot 1: the values of slots 0 and 1 out and back, in turn.
        let (l0, v0) = take(&slots);
        let (l1, v1) = take(&slots);
        assert_eq!((l0.index(), l1.index()), (0, 1));
        assert!(matches!(slots.check_in(l0, v0, 0), CheckIn::Kept));
        // Slot 1 stays held, so the builder's claim cannot join it.
        let builder = {
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let lease = match slots.try_open() {
                    Some(lease) => lease,
                    None => panic!("room for a third value"),
                };
                assert_eq!(lease.index(), 2, "the lowest empty slot grows the table");
                slots.occupy_born(&lease, 1);
                assert!(matches!(slots.check_in(lease, 11, 1), CheckIn::Kept));
            })
        };
        let acquirer = take_on_a_thread(&slots);
        builder.join().unwrap();
        let (lease, value) = acquirer.join().unwrap();
        let index = lease.index();
        assert!(matches!(slots.check_in(lease, value, 1), CheckIn::Kept));
        match (index, value) {
            (2, 11) => reach.hit("took the new value past the cursor"),
            (0, 7) => reach.hit("wrapped to slot 0"),
            other => panic!("unexpected checkout {other:?}"),
        }
        assert!(matches!(slots.check_in(l1, v1, 0), CheckIn::Kept));
        assert_settled(&slots);
        assert_eq!(slots.live(), 3);
    });
    reach
        .explored(2)
        .reached_all(&["took the new value past the cursor", "wrapped to slot 0"]);
}
