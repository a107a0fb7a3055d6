//! The hot paths allocate nothing, counted by a global allocator: once a pool is warm, every
//! acquire and release that finds capacity (stream guards borrowed and owned, sync and async;
//! a client checkout and return; a managed pool's checkout and return of an idle object; a
//! keyed admission and its release; a hot session acquire; a limit's permit, with and without
//! its future; a bare slot table's reserve and release). Nor does a wait on the gate and its
//! wake-up: the waiter's queue node lives in its future.
//! And a managed object's creation allocates its entry once (object and record together).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use common::managed::Fixture;
use common::poll_once;
use common::stream::{Pool, Script};
use slotpool::__internal::slots::{Capacity, SlotTable};
use slotpool::blocks::{Gate, Limit};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Rounds of each path inside the counted section.
const ROUNDS: usize = 1_000;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

/// Polls `future` once and returns its output: the hot paths resolve without waiting.
fn ready<F: Future>(future: F, what: &str) -> F::Output {
    match poll_once(pin!(future)) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("{what} waited although capacity was free"),
    }
}

/// A stream pool of four streams at queue depth `depth`, its first stream started (that
/// allocates, once).
fn warm_stream_pool(depth: usize) -> Pool {
    let (script, _) = Script::echo();
    let pool = script
        .builder()
        .max_streams(4)
        .max_queue_depth(depth)
        .reap_interval(None)
        .build()
        .unwrap();
    drop(pool.try_acquire().unwrap());
    let _ = pool.stats();
    pool
}

/// The counter itself: a zero below means nothing was allocated, not that nothing is counted.
#[test]
fn the_allocator_counts() {
    let n = allocations_during(|| {
        let boxed = std::hint::black_box(Box::new(7u64));
        let mut grown = std::hint::black_box(Vec::<u64>::with_capacity(1));
        grown.extend([1, 2, 3]);
        drop((boxed, grown));
    });
    assert_eq!(n, 3, "one allocation, one reservation, one growth");
}

#[tokio::test(flavor = "current_thread")]
async fn stream_pool_acquire_and_release_allocate_nothing() {
    let pool = Arc::new(warm_stream_pool(8));
    let n = allocations_during(|| {
        for _ in 0..ROUNDS {
            drop(pool.try_acquire().unwrap());
            drop(ready(pool.acquire(), "acquire").unwrap());
            drop(pool.try_acquire_owned().unwrap());
            drop(ready(pool.acquire_owned(), "acquire_owned").unwrap());
        }
    });
    assert_eq!(n, 0, "allocations on the stream acquire/release fast paths");
    assert_eq!(pool.stats().table.in_flight, 0);
}

/// At a queue depth of 1 every acquire fills its stream and every release frees it again.
#[tokio::test(flavor = "current_thread")]
async fn stream_pool_at_depth_one_allocates_nothing() {
    let pool = warm_stream_pool(1);
    let n = allocations_during(|| {
        for _ in 0..ROUNDS {
            drop(ready(pool.acquire(), "acquire").unwrap());
        }
    });
    assert_eq!(n, 0, "allocations on the depth-1 acquire/release path");
}

#[tokio::test(flavor = "current_thread")]
async fn client_checkout_and_return_allocate_nothing() {
    let fixture = common::channel::Fixture::new(4, Some(4));
    // Warm up: the first checkout opens a channel and builds a client.
    drop(fixture.clients.acquire().await.unwrap());
    let n = allocations_during(|| {
        for _ in 0..ROUNDS {
            drop(ready(fixture.clients.acquire(), "client checkout").unwrap());
        }
    });
    assert_eq!(n, 0, "allocations on the client checkout/return path");
    assert_eq!(fixture.clients.stats().in_use, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn keyed_admission_and_release_allocate_nothing() {
    let keyed = common::keyed::one_slot_journal();
    let (journal, ledger) = (&"journal", &"ledger");
    drop(keyed.admit(journal, common::keyed::LONG).await.unwrap());
    let n = allocations_during(|| {
        for _ in 0..ROUNDS {
            drop(ready(keyed.admit(journal, common::keyed::LONG), "admit").unwrap());
            // An alias resolves to the same share without allocating either.
            drop(ready(keyed.admit(ledger, common::keyed::LONG), "admit").unwrap());
        }
    });
    assert_eq!(n, 0, "allocations on the keyed admit/release path");
}

#[tokio::test(flavor = "current_thread")]
async fn session_hot_acquire_allocates_nothing() {
    let (pool, _counts, _time) = common::session::pool(4);
    let ctx = common::session::ctx();
    // Warm up: the first acquire establishes the session.
    drop(pool.acquire("hot", &ctx).await.unwrap());
    common::session::settle_establishments(&pool).await;
    let n = allocations_during(|| {
        for _ in 0..ROUNDS {
            drop(ready(pool.acquire("hot", &ctx), "hot acquire").unwrap());
        }
    });
    assert_eq!(n, 0, "allocations on the hot session acquire");
}

#[test]
fn slot_table_and_limit_fast_paths_allocate_nothing() {
    let table = SlotTable::<()>::new(Capacity::Bounded(64), 4).unwrap();
    let limit = Limit::new(8).unwrap();
    let warm = table.try_reserve().unwrap();
    assert!(table.release(warm));
    let n = allocations_during(|| {
        for _ in 0..ROUNDS {
            let r = table.try_reserve().unwrap();
            assert!(table.release(r));
            let r = table.try_reserve().unwrap();
            table.release_held(r);
            drop(limit.try_acquire().unwrap());
            // The waiting acquire that finds a permit free resolves at once, unqueued.
            drop(ready(limit.acquire(), "limit acquire").unwrap());
        }
    });
    assert_eq!(n, 0);
}

/// A wait that enqueues, is woken (handed a permit, or notified) and resolves; and a wait that
/// enqueues and is cancelled: no allocation on either, with a waker whose clone allocates
/// nothing (a runtime's wakers are reference counts).
#[test]
fn a_wait_on_the_gate_and_its_wakeup_allocate_nothing() {
    let limit = Limit::new(1).unwrap();
    let gate = Gate::new();
    let open = AtomicBool::new(false);
    let take = || open.swap(false, Ordering::SeqCst).then_some(());
    let mut cx = Context::from_waker(Waker::noop());
    let n = allocations_during(|| {
        for _ in 0..1_000 {
            // Wait, handoff, resolve.
            let held = limit.try_acquire().unwrap();
            let mut wait = pin!(limit.acquire());
            assert!(poll_once(wait.as_mut()).is_pending());
            assert_eq!(limit.waiting(), 1);
            drop(held);
            match poll_once(wait.as_mut()) {
                Poll::Ready(permit) => drop(permit.unwrap()),
                Poll::Pending => panic!("the permit was handed to the waiter"),
            }

            // Wait, cancel.
            let held = limit.try_acquire().unwrap();
            {
                let mut wait = pin!(limit.acquire());
                assert!(poll_once(wait.as_mut()).is_pending());
            }
            assert_eq!(limit.waiting(), 0);
            drop(held);

            // Wait on a bare gate, notify, resolve.
            let mut waiter = pin!(gate.waiter());
            assert!(waiter.as_mut().poll_until(&mut cx, take).is_pending());
            open.store(true, Ordering::SeqCst);
            gate.notify_one();
            assert_eq!(
                waiter.as_mut().poll_until(&mut cx, take),
                Poll::Ready(Ok(()))
            );
        }
    });
    assert_eq!(n, 0, "allocations on gate waits");
}

#[tokio::test(flavor = "current_thread")]
async fn managed_checkout_and_return_allocate_nothing() {
    let f = Fixture::new(4);
    // Warm up: the first get creates the object (that allocates, once).
    drop(f.pool.get().await.unwrap());
    let n = allocations_during(|| {
        for _ in 0..1_000 {
            match poll_once(pin!(f.pool.get())) {
                Poll::Ready(object) => drop(object.unwrap()),
                Poll::Pending => panic!("an idle object was there"),
            }
        }
    });
    assert_eq!(n, 0, "allocations on the managed checkout/return path");
    assert_eq!(
        f.ledger.recycles.load(std::sync::atomic::Ordering::SeqCst),
        1_000
    );
}

/// A manager whose objects cost no allocation of their own.
struct Words;

impl slotpool::managed::Manager for Words {
    type Type = u64;
    type Error = std::convert::Infallible;

    async fn create(&self) -> Result<u64, std::convert::Infallible> {
        Ok(7)
    }
}

/// What creating an object allocates (CHANGELOG, "one allocation per object created"): the
/// object and the pool's record of it share one box, and the creation itself is boxed while
/// it runs (the manager's `create` under its guards; freed when it ends). Two allocations in
/// all, where a separate box for the object and `Arc` for its record made three. Dropping the
/// object returns it idle, which allocates nothing.
#[tokio::test(flavor = "current_thread")]
async fn a_created_managed_object_and_its_record_are_one_allocation() {
    let pool = || {
        slotpool::managed::Pool::builder(Words)
            .max_size(4)
            .reap_interval(None)
            .build()
            .unwrap()
    };
    // This thread's first use of the pools' counters and clocks sets them up: not counted.
    let warm = pool();
    drop(warm.get().await.unwrap());
    let pool = pool();
    let n = allocations_during(|| match poll_once(pin!(pool.get())) {
        Poll::Ready(object) => drop(object.unwrap()),
        Poll::Pending => panic!("a create that is ready at once waited"),
    });
    assert_eq!(
        n, 2,
        "allocations to create, hand out and return one object"
    );
    assert_eq!(pool.status().size, 1);
}
