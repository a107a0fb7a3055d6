#![cfg(slotpool_loom)]
//! Loom models of the return without a reference count (`ExclusiveSlots::check_in_unpinned`,
//! the managed pool's and the client pool's guard drop): the returned value is the only thing
//! that keeps the pool alive, so no return may still read the table once whoever takes the
//! value out for good has dropped it (see `slotpool::__internal::exclusive`, "Returning without a
//! reference count").
//!
//! Each model builds the pool as the managed pool does: a value ([`Obj`]) carries, on the heap,
//! a reference to the pool ([`Pool`]) that holds the table, so the pool lives exactly as long
//! as its handle or any of its values. The returning thread holds nothing else: it reaches the
//! table through a raw pointer, as the guards do. It counts itself in [`Window`] from just
//! before its return until just before it ends it, and the pool's `Drop` asserts that no
//! return is inside: a protocol that let the last reference go while a return still reads the
//! table fails that assertion (before the memory is freed). Every model also checks that the
//! pool was freed in the end (no cycle left behind) and that its accounting was exact.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --test unpinned --target-dir target/loom`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use slotpool::__internal::exclusive::{CheckIn, Checkout, Ending, ExclusiveSlots, Lease, Unpinned};
use slotpool::__internal::slots::Capacity;
use slotpool::TryAcquireError;
use slotpool_loom_tests::model;

/// Returns inside the table right now (a separate allocation: it outlives the pool).
#[derive(Clone, Default)]
struct Window(Arc<AtomicUsize>);

impl Window {
    fn enter(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The pool: the table, and what its drop checks.
struct Pool {
    slots: ExclusiveSlots<Obj>,
    window: Window,
    freed: Arc<AtomicBool>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        assert_eq!(
            self.window.0.load(Ordering::SeqCst),
            0,
            "the pool was freed while a return was still inside it"
        );
        self.freed.store(true, Ordering::SeqCst);
    }
}

/// A pooled value: its own reference to the pool, on the heap (the managed pool's anchor), so
/// its address stays put while the value moves in and out of its cell.
struct Obj(Box<Arc<Pool>>);

impl std::fmt::Debug for Obj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Obj")
    }
}

/// A pool of one slot holding one idle value; the handle, and what the checks read after the
/// pool is gone.
fn pool_with_one_value() -> (Arc<Pool>, Window, Arc<AtomicBool>) {
    let window = Window::default();
    let freed = Arc::new(AtomicBool::new(false));
    let pool = Arc::new(Pool {
        slots: ExclusiveSlots::new(Capacity::Bounded(1)).unwrap(),
        window: window.clone(),
        freed: Arc::clone(&freed),
    });
    let lease = match pool.slots.try_checkout() {
        Ok(Checkout::Vacant { lease }) => lease,
        other => panic!("an empty table claims, got {other:?}"),
    };
    pool.slots.occupy_born(&lease, 0);
    let value = Obj(Box::new(Arc::clone(&pool)));
    assert!(matches!(
        pool.slots.check_in(lease, value, 0),
        CheckIn::Kept
    ));
    (pool, window, freed)
}

/// Takes the idle value.
fn take(pool: &Pool) -> (Lease, Obj) {
    match pool.slots.try_checkout() {
        Ok(Checkout::Idle { lease, value }) => (lease, value),
        other => panic!("an idle value, got {other:?}"),
    }
}

/// What a return did, for the reach counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// The fast path: the flag set, cleared at the end.
    Settled,
    /// Kept under a reference of its own (the previous return still settling).
    PinnedKept,
    /// Surplus: the table was closed or shrunk before the value went back.
    Surplus,
    /// The release found the table over its bound and ran the trimming pass.
    Trimmed,
}

/// A guard's drop: the value's return with nothing but a raw pointer to the pool, counted in
/// the window until just before its end.
fn give_back(window: &Window, lease: Lease, value: Obj, stamp: u64) -> Path {
    let anchor: *const Arc<Pool> = &*value.0;
    // SAFETY: the value is ours: its reference keeps the pool alive until it is in its cell,
    // and the protocol keeps it alive after that, until `end` (what this model checks).
    let pool: *const Pool = unsafe { Arc::as_ptr(&*anchor) };
    window.enter();
    // SAFETY: as above; `keep` runs only while the value, and so the anchor, is alive.
    let keep = || Arc::clone(unsafe { &*anchor });
    // SAFETY: as above.
    let (path, ending) = match unsafe { &*pool }
        .slots
        .check_in_unpinned(lease, value, stamp, keep)
    {
        Unpinned::Settling(settling) => (Path::Settled, Ending::Settling(settling)),
        Unpinned::Pinned(kept, check_in) => {
            let path = match &check_in {
                CheckIn::Kept => Path::PinnedKept,
                CheckIn::Surplus(_) => Path::Surplus,
                CheckIn::Trimmed(_) => Path::Trimmed,
            };
            // The values that came back are closed here, under our own reference.
            drop(check_in);
            (path, Ending::Pinned(kept))
        }
    };
    window.leave();
    // SAFETY: nothing below touches the pool.
    unsafe { ending.end() };
    path
}

/// Spawns the return of a held value; the thread answers with the path it took.
fn give_back_on_a_thread(
    window: &Window,
    lease: Lease,
    value: Obj,
    stamp: u64,
) -> thread::JoinHandle<Path> {
    let window = window.clone();
    thread::spawn(move || give_back(&window, lease, value, stamp))
}

fn poll_once<F: Future>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// A value's return racing the pool's last handle being dropped: the close, its closing pass
/// (which takes the returned value if it is idle by then, and drops it) and the handle's drop.
/// Whether the close came first (the value comes back surplus), after the return (the closing
/// pass waits for the return to end before it drops the value) or in between (the return
/// sees the bound and trims), the pool is freed once, after the return.
#[test]
fn a_return_racing_the_last_handles_drop() {
    let reach = model(|reach| {
        let (pool, window, freed) = pool_with_one_value();
        let (lease, value) = take(&pool);
        let releaser = give_back_on_a_thread(&window, lease, value, 1);
        // The last handle goes: close, the closing pass, then the handle's own reference.
        pool.slots.close();
        let closed_idle = pool.slots.reap(|_| true).len();
        drop(pool);
        let path = releaser.join().unwrap();
        reach.hit(match (path, closed_idle) {
            (Path::Settled, 1) => "the closing pass took the settled value",
            (Path::Settled, _) => "settled, then taken by nobody (trimmed by the return)",
            (Path::Surplus, _) => "the value came back surplus",
            (Path::Trimmed, _) => "the return trimmed its own value",
            (Path::PinnedKept, _) => "kept under a reference",
        });
        assert!(freed.load(Ordering::SeqCst), "the pool was not freed");
    });
    reach.explored(2).reached_all(&[
        "the closing pass took the settled value",
        "the value came back surplus",
        "the return trimmed its own value",
    ]);
}

/// A return handed to a waiter that then retires the value for good (a discard: the object
/// was broken) and lets go of its handle, while the pool's other handle is dropped: the
/// waiter's retirement waits for the return that handed it the value to end, so the last
/// reference goes after it.
#[test]
fn a_handed_over_value_retired_while_its_return_ends() {
    let reach = model(|reach| {
        let (pool, window, freed) = pool_with_one_value();
        let (lease, value) = take(&pool);
        let waiter_pool = Arc::clone(&pool);
        // The waiter queues first (its one poll returns Pending: the only value is out).
        let waiter = thread::spawn(move || {
            let pool = waiter_pool;
            let (checkout, waited) = {
                let mut checkout = Box::pin(pool.slots.checkout());
                match poll_once(checkout.as_mut()) {
                    Poll::Ready(checkout) => (checkout, false),
                    Poll::Pending => (loom::future::block_on(checkout), true),
                }
            };
            let Ok(Checkout::Idle { lease, value }) = checkout else {
                panic!("the waiter gets the returned value, got {checkout:?}");
            };
            // Broken: out for good. Dropping the retired value drops a reference to the pool.
            drop(pool.slots.retire_value(lease, value));
            drop(pool);
            waited
        });
        let releaser = give_back_on_a_thread(&window, lease, value, 1);
        drop(pool);
        let path = releaser.join().unwrap();
        let waited = waiter.join().unwrap();
        reach.hit_if(
            waited && path == Path::Settled,
            "handed over while settling",
        );
        assert!(freed.load(Ordering::SeqCst), "the pool was not freed");
    });
    reach
        .explored(2)
        .reached_all(&["handed over while settling"]);
}

/// A return racing a shrink to zero (`resize`, which trims idle values) by a caller that then
/// drops the last handle: the value is trimmed by the shrink (after the return ended), by the
/// return itself (it saw the new bound after its release), or comes back surplus.
#[test]
fn a_return_racing_a_shrink_and_the_last_handles_drop() {
    let reach = model(|reach| {
        let (pool, window, freed) = pool_with_one_value();
        let (lease, value) = take(&pool);
        let releaser = give_back_on_a_thread(&window, lease, value, 1);
        let trimmed = pool.slots.resize(0).unwrap().len();
        drop(pool);
        let path = releaser.join().unwrap();
        reach.hit(match (path, trimmed) {
            (Path::Settled, 1) => "the shrink trimmed the settled value",
            (Path::Trimmed, _) => "the return trimmed its own value",
            (Path::Surplus, _) => "the value came back surplus",
            _ => "other",
        });
        assert!(freed.load(Ordering::SeqCst), "the pool was not freed");
    });
    reach.explored(2).reached_all(&[
        "the shrink trimmed the settled value",
        "the return trimmed its own value",
        "the value came back surplus",
    ]);
}

/// A return racing the reaper (every idle value expired), whose caller then drops the last
/// handle after closing: the reaper waits for the return to end before it hands the value
/// out to be dropped.
#[test]
fn a_return_racing_the_reaper_and_the_last_handles_drop() {
    let reach = model(|reach| {
        let (pool, window, freed) = pool_with_one_value();
        let (lease, value) = take(&pool);
        let releaser = give_back_on_a_thread(&window, lease, value, 1);
        // Whether the return has begun: read for the reach count only. (Without an access of
        // its own before the pass, loom's bounded search never ran the whole return before it.)
        let began = window.0.load(Ordering::SeqCst) > 0;
        let reaped = pool.slots.reap(|_| true).len();
        pool.slots.close();
        let closed_idle = pool.slots.reap(|_| true).len();
        assert!(
            matches!(pool.slots.try_checkout(), Err(TryAcquireError::Closed)),
            "closed"
        );
        drop(pool);
        let path = releaser.join().unwrap();
        reach.hit_if(
            path == Path::Settled && reaped == 1,
            "the reaper took the settled value",
        );
        reach.hit_if(closed_idle == 1, "the closing pass took it");
        reach.hit_if(began && reaped == 1, "the pass met a return under way");
        assert!(freed.load(Ordering::SeqCst), "the pool was not freed");
    });
    reach.explored(2).reached_all(&[
        "the reaper took the settled value",
        "the closing pass took it",
        "the pass met a return under way",
    ]);
}

/// Two returns of one slot back to back, racing the pool's close and the drop of its last
/// handle: the second holder checked the value out while the first return was still settling,
/// and returns it at once. It must not take the flag the first return still owns (it returns
/// under a reference of its own instead): the first return's `done` would end the second's
/// protection while the second still reads the table.
#[test]
fn a_return_while_the_previous_return_of_its_slot_settles() {
    let reach = model(|reach| {
        let (pool, window, freed) = pool_with_one_value();
        let (lease, value) = take(&pool);
        let first = give_back_on_a_thread(&window, lease, value, 1);
        let second_pool = Arc::clone(&pool);
        let second_window = window.clone();
        let second = thread::spawn(move || {
            let taken = match second_pool.slots.try_checkout() {
                Ok(Checkout::Idle { lease, value }) => Some((lease, value)),
                _ => None,
            };
            drop(second_pool);
            taken.map(|(lease, value)| give_back(&second_window, lease, value, 2))
        });
        pool.slots.close();
        drop(pool.slots.reap(|_| true));
        drop(pool);
        let first_path = first.join().unwrap();
        let second_path = second.join().unwrap();
        reach.hit_if(
            first_path == Path::Settled && second_path == Some(Path::PinnedKept),
            "the second return found the first still settling",
        );
        assert!(freed.load(Ordering::SeqCst), "the pool was not freed");
    });
    reach
        .explored(2)
        .reached_all(&["the second return found the first still settling"]);
}
