//! The fast path allocates nothing: acquire + release on a stream pool with room, a managed
//! pool's checkout + return of an idle object (recycled: the policy's default), and reserve +
//! release on a bare slot table, counted by a global allocator. Nor does a wait on the gate:
//! the waiter's queue node lives in its future.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use common::managed::Fixture;
use common::poll_once;
use common::stream::Script;
use slotpool::slots::{Capacity, SlotTable};
use slotpool::{Gate, Limit};

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

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[tokio::test(flavor = "current_thread")]
async fn stream_pool_acquire_and_release_allocate_nothing() {
    let (script, _) = Script::echo();
    let pool = script
        .builder()
        .max_streams(4)
        .max_queue_depth(8)
        .reap_interval(None)
        .build()
        .unwrap();
    // Warm up: the first acquire starts the stream (that allocates, once).
    drop(pool.try_acquire().unwrap());
    let _ = pool.stats();
    let n = allocations_during(|| {
        for _ in 0..1_000 {
            drop(pool.try_acquire().unwrap());
            match poll_once(pin!(pool.acquire())) {
                Poll::Ready(guard) => drop(guard.unwrap()),
                Poll::Pending => panic!("room was available"),
            }
        }
    });
    assert_eq!(n, 0, "allocations on the acquire/release fast path");
}

#[test]
fn slot_table_and_limit_fast_paths_allocate_nothing() {
    let table = SlotTable::<()>::new(Capacity::Bounded(64), 4).unwrap();
    let limit = Limit::new(8).unwrap();
    let warm = table.try_reserve().unwrap();
    assert!(table.release(warm));
    let n = allocations_during(|| {
        for _ in 0..1_000 {
            let r = table.try_reserve().unwrap();
            assert!(table.release(r));
            drop(limit.try_acquire().unwrap());
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
