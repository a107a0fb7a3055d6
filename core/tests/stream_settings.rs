//! Settings that build must run: every `StreamPoolBuilder` setter swept over 0, 1, the largest
//! value it accepts and one past it. A refused value is a `ConfigError` naming the setter the
//! user called; an accepted extreme builds a pool that runs a request, nothing panics (not even
//! on a background task), and memory follows what is used, not the bounds: a counting global
//! allocator checks what each build and request allocated. (Durations have no "one past":
//! `Duration::MAX` is the largest there is.)

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::stream::{round_trip, Script};
use common::{build_error, MockTime};
use slotpool::__internal::slots::{MAX_LOAD, MAX_SLOTS};
use slotpool::stream::{StreamPoolBuilder, MAX_MIN_STREAMS};
use slotpool::ConfigError;

struct Counting;

thread_local! {
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; it only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATED.try_with(|n| n.set(n.get() + layout.size() as u64));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATED.try_with(|n| n.set(n.get() + new_size as u64));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Panics anywhere in this binary (background tasks included), counted by a hook.
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// What building a pool, running one request through it and dropping it allocated, on this
/// thread (the runtime is current-thread, so every driver and echo task runs here).
const BUDGET: u64 = 1 << 20;

/// Per stream opened at build by `min_streams` (its driver, channels, echo task).
const PER_PREWARMED_STREAM: u64 = 16 << 10;

type Builder = StreamPoolBuilder<common::stream::TestConnector>;

/// Builds with `configure`, runs one request, drops the pool; returns the bytes allocated.
async fn runs(script: &Script, configure: impl FnOnce(Builder) -> Builder) -> u64 {
    let before = ALLOCATED.with(Cell::get);
    let pool = configure(script.builder())
        .build()
        .unwrap_or_else(|e| panic!("an accepted value was refused: {e}"));
    round_trip(&pool, 1).await;
    drop(pool);
    common::run_spawned().await;
    ALLOCATED.with(Cell::get) - before
}

fn refused(script: &Script, configure: impl FnOnce(Builder) -> Builder) -> ConfigError {
    build_error(configure(script.builder()).build())
}

fn too_large(error: ConfigError) -> &'static str {
    match error {
        ConfigError::TooLarge { name, .. } => name,
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_setter_at_its_extremes_builds_and_runs_or_is_refused_by_name() {
    std::panic::set_hook(Box::new(|info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        eprintln!("{info}");
    }));
    let (script, _) = Script::echo();
    let time = MockTime::new();
    // Background reaping off unless the case is about it.
    let quiet = |b: Builder| b.reap_interval(None);
    let within = |what: &str, bytes: u64, budget: u64| {
        assert!(
            bytes <= budget,
            "{what} allocated {bytes} bytes (budget {budget})"
        );
    };

    // max_queue_depth
    assert_eq!(
        refused(&script, |b| b.max_queue_depth(0)),
        ConfigError::Zero("max_queue_depth")
    );
    for depth in [1, MAX_LOAD as usize] {
        let bytes = runs(&script, |b| quiet(b).max_queue_depth(depth)).await;
        within("max_queue_depth", bytes, BUDGET);
    }
    for depth in [MAX_LOAD as usize + 1, usize::MAX] {
        assert_eq!(
            too_large(refused(&script, |b| b.max_queue_depth(depth))),
            "max_queue_depth"
        );
        // Unbounded or not, the error names the setter.
        assert_eq!(
            too_large(refused(&script, |b| b
                .max_queue_depth(depth)
                .max_streams(4))),
            "max_queue_depth"
        );
    }

    // max_streams (and unbounded)
    assert_eq!(
        refused(&script, |b| b.max_streams(0)),
        ConfigError::Zero("max_streams")
    );
    for streams in [1, MAX_SLOTS] {
        let bytes = runs(&script, |b| quiet(b).max_streams(streams)).await;
        within("max_streams", bytes, BUDGET);
        let bytes = runs(&script, |b| {
            quiet(b)
                .max_streams(streams)
                .max_queue_depth(MAX_LOAD as usize)
        })
        .await;
        within("max_streams with the deepest queue", bytes, BUDGET);
    }
    let bytes = runs(&script, |b| quiet(b).max_streams(8).unbounded()).await;
    within("unbounded", bytes, BUDGET);
    assert_eq!(
        too_large(refused(&script, |b| b.max_streams(MAX_SLOTS + 1))),
        "max_streams"
    );
    assert_eq!(
        too_large(refused(&script, |b| b
            .max_streams(MAX_SLOTS + 1)
            .max_queue_depth(MAX_SLOTS + 1))),
        "max_streams",
        "each value is blamed on its own setter"
    );

    // min_streams
    for min in [0, 1] {
        let bytes = runs(&script, |b| quiet(b).min_streams(min)).await;
        within("min_streams", bytes, BUDGET);
    }
    let bytes = runs(&script, |b| quiet(b).min_streams(MAX_MIN_STREAMS)).await;
    within(
        "min_streams at its maximum",
        bytes,
        BUDGET + MAX_MIN_STREAMS as u64 * PER_PREWARMED_STREAM,
    );
    assert_eq!(
        too_large(refused(&script, |b| b.min_streams(MAX_MIN_STREAMS + 1))),
        "min_streams"
    );
    assert!(matches!(
        refused(&script, |b| b.max_streams(1).min_streams(2)),
        ConfigError::Inverted {
            low: "min_streams",
            high: "max_streams",
            ..
        }
    ));

    // The durations: zero is refused by name; a nanosecond and `Duration::MAX` run.
    type Setter = fn(Builder, Duration) -> Builder;
    let durations: [(&str, Setter); 5] = [
        ("idle_timeout", |b, d| b.idle_timeout(d)),
        ("reap_interval", |b, d| b.reap_interval(Some(d))),
        ("open_timeout", |b, d| b.open_timeout(Some(d))),
        ("stall_timeout", |b, d| b.stall_timeout(Some(d))),
        ("breaker", |b, d| b.breaker(1, d)),
    ];
    for (name, set) in durations {
        if name != "breaker" {
            assert_eq!(
                refused(&script, |b| set(b, Duration::ZERO)),
                ConfigError::Zero(name)
            );
        }
        for value in [Duration::ZERO, Duration::from_nanos(1), Duration::MAX] {
            if value.is_zero() && name != "breaker" {
                continue;
            }
            let quiet_unless_reaping = |b: Builder| {
                if name == "reap_interval" {
                    b
                } else {
                    quiet(b)
                }
            };
            let bytes = runs(&script, |b| set(quiet_unless_reaping(b), value)).await;
            within(name, bytes, BUDGET);
        }
    }
    for timeout in [None, Some(Duration::MAX)] {
        runs(&script, |b| {
            quiet(b).open_timeout(timeout).stall_timeout(timeout)
        })
        .await;
    }
    // A reaper that ticks every nanosecond or never: let it run a while.
    for every in [Duration::from_nanos(1), Duration::MAX] {
        let pool = script.builder().reap_interval(Some(every)).build().unwrap();
        for _ in 0..3 {
            round_trip(&pool, 2).await;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    // breaker thresholds: 0 is refused by name, 1 and the largest run.
    assert_eq!(
        refused(&script, |b| b.breaker(0, Duration::from_secs(1))),
        ConfigError::Zero("breaker")
    );
    for threshold in [1, u32::MAX] {
        runs(&script, |b| quiet(b).breaker(threshold, Duration::MAX)).await;
    }

    // clock: a mock one runs.
    runs(&script, |b| quiet(b).clock(time.clock())).await;

    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "something panicked");
}

/// The builder's and the pool's `Debug` say what a log line needs: the settings as given,
/// and the pool's statistics.
#[tokio::test]
async fn the_builder_and_the_pool_print_their_settings_and_stats() {
    let (script, _) = Script::echo();
    let builder = script
        .sized(3, 2)
        .min_streams(1)
        .open_timeout(Some(Duration::from_secs(7)));
    let printed = format!("{builder:?}");
    for part in [
        "StreamPoolBuilder",
        "max_streams: Some(3)",
        "max_queue_depth: 2",
        "min_streams: 1",
        "open_timeout: Some(7s)",
    ] {
        assert!(printed.contains(part), "{part} missing from {printed}");
    }
    let pool = builder.build().unwrap();
    round_trip(&pool, 1).await;
    let printed = format!("{pool:?}");
    for part in ["StreamPool", "stats: StreamStats", "acquires: 1"] {
        assert!(printed.contains(part), "{part} missing from {printed}");
    }
}
