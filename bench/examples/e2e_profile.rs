//! A fixed number of requests through one of the e2e stacks (`e2e/concurrency-*`), for
//! per-request costs: `e2e_profile slot|ref [concurrency] [requests] [warmup]`.
//!
//! Prints, for the timed requests only (after an untimed warm-up that opens the streams):
//! allocations (a counting global allocator: the whole process, server included), streams and
//! channels open, the callers' runtime's worker parks, and wall time. For instructions, run it
//! under `valgrind --tool=callgrind` twice with different request counts and divide the
//! difference of the totals by the difference of the counts (set-up and warm-up cancel out).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use slotpool_bench::cases::e2e::E2e;
use slotpool_bench::grpc::page_request;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: the caller's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: the caller's contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(new_size as u64, Relaxed);
        // SAFETY: the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn run(e2e: &E2e, slot: bool, tasks: usize, per_task: u64, base: u64) {
    let slotpool = Arc::clone(&e2e.slotpool);
    let reference = Arc::clone(&e2e.reference);
    e2e.rt.block_on(async move {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let slotpool = Arc::clone(&slotpool);
                let reference = Arc::clone(&reference);
                tokio::spawn(async move {
                    for i in 0..per_task {
                        let request = page_request(t as u32, base + i);
                        let status = if slot {
                            slotpool.get_page(request).await.expect("ok").status
                        } else {
                            reference.get_page(request).await.expect("ok").status
                        };
                        assert_eq!(status, 0);
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.expect("task");
        }
    });
}

fn parks(e2e: &E2e) -> (u64, u64) {
    let m = e2e.rt.metrics();
    let s = e2e.server_rt.metrics();
    let sum = |m: &tokio::runtime::RuntimeMetrics| {
        (0..m.num_workers())
            .map(|w| m.worker_park_count(w))
            .sum::<u64>()
    };
    (sum(&m), sum(&s))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "slot".into());
    let slot = match which.as_str() {
        "slot" => true,
        "ref" => false,
        other => panic!("slot or ref, not {other}"),
    };
    let tasks: usize = args.next().map_or(64, |n| n.parse().expect("concurrency"));
    let requests: u64 = args.next().map_or(16_000, |n| n.parse().expect("requests"));
    let warmup: u64 = args.next().map_or(2_048, |n| n.parse().expect("warmup"));
    let e2e = E2e::new();
    run(&e2e, slot, tasks, (warmup / tasks as u64).max(1), 0);
    let per_task = (requests / tasks as u64).max(1);
    let n = per_task * tasks as u64;
    let (a0, b0) = (ALLOCS.load(Relaxed), BYTES.load(Relaxed));
    let (p0, sp0) = parks(&e2e);
    let start = Instant::now();
    run(&e2e, slot, tasks, per_task, 1_000_000);
    let elapsed = start.elapsed();
    let (a1, b1) = (ALLOCS.load(Relaxed), BYTES.load(Relaxed));
    let (p1, sp1) = parks(&e2e);
    let (streams, channels, extra) = if slot {
        let stats = e2e.slotpool.streams.stats();
        let open = e2e.slotpool.open();
        (
            open.streams,
            open.channels,
            format!(
                "spin_ups {} stream_failures {} late {}",
                stats.spin_ups, stats.stream_failures, stats.late_responses
            ),
        )
    } else {
        let (streams, _) = e2e.reference.streams.load();
        let (channels, _) = e2e.reference.channels.load();
        (streams, channels, String::new())
    };
    let f = n as f64;
    println!(
        "{which} tasks {tasks} requests {n}: {:.0} ns/req, allocs/req {:.2} ({:.0} B/req), \
         client-rt parks/req {:.3}, server-rt parks/req {:.3}, streams {streams}, channels \
         {channels} {extra}",
        elapsed.as_nanos() as f64 / f,
        (a1 - a0) as f64 / f,
        (b1 - b0) as f64 / f,
        (p1 - p0) as f64 / f,
        (sp1 - sp0) as f64 / f,
    );
}
