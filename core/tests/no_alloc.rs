//! The fast path allocates nothing: acquire + release on a stream pool with room, a managed
//! pool's checkout + return of an idle object (recycled: the policy's default), and reserve +
//! release on a bare slot table, counted by a global allocator.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::pin::pin;
use std::task::Poll;

use common::managed::Fixture;
use common::poll_once;
use common::stream::Script;
use slotpool::slots::{Capacity, SlotTable};
use slotpool::Limit;

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
