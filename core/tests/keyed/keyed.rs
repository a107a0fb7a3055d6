//! Behaviour of `slotpool::keyed` through its public API.
//!
//! No test measures time. Deadlines run on tokio's paused clock (`start_paused`), which
//! advances on its own when every task is idle and, while a blocking closure is alive (tokio
//! then inhibits auto-advance), by explicit `tokio::time::advance`. Blocking closures are held
//! open with channels, never sleeps.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::keyed::{hold, one_slot_journal, read_now, LONG};
use crate::common::logs::capture_logs;
use crate::common::panics::{inject, watch_panics};
use crate::common::{built, join_all, run_spawned, spawn_with};
use slotpool::keyed::{BuildError, Keyed, KeyedError};
use slotpool::{ConfigError, Reach};

// ---------------------------------------------------------------------------------------------
// Refusal
// ---------------------------------------------------------------------------------------------

/// A call that finds the share full waits for its bound, then is refused with the caller's key,
/// the bound and "not run"; its closure never runs; the per-key refusal counter goes up.
#[tokio::test(start_paused = true)]
async fn refusal_after_deadline_never_runs_the_closure() {
    let keyed = one_slot_journal();
    let held = keyed.admit(&"journal", LONG).await;
    let held = held.unwrap_or_else(|e| panic!("first admission refused: {e}"));

    let ran = Arc::new(AtomicBool::new(false));
    let ran_in = Arc::clone(&ran);
    let bound = Duration::from_millis(50);
    let start = tokio::time::Instant::now();
    let result = keyed
        .mutate(&"journal", bound, move || {
            ran_in.store(true, Ordering::SeqCst);
        })
        .await;

    assert_eq!(
        result,
        Err(KeyedError::Refused {
            key: "journal",
            waited: bound,
            reach: Reach::NotSent
        })
    );
    assert!(result.is_err_and(|e| e.reach().retry_is_safe()));
    // Refused once the (paused) clock reached the bound: not before, and on time (the keyed
    // pool has no reaper; the bound is the call's own tokio timer, rounded up to its next
    // millisecond tick).
    let took = tokio::time::Instant::now() - start;
    assert!(
        took >= bound && took <= bound + Duration::from_millis(5),
        "refused after {took:?}"
    );
    assert!(!ran.load(Ordering::SeqCst), "a refused closure ran");
    let stats = keyed.stats_for(&"journal");
    assert_eq!(stats.as_ref().map(|s| (s.refusals, s.in_use)), Some((1, 1)));

    // A slot freed before the bound admits the waiter instead.
    let waiter = spawn_with(&keyed, move |keyed| async move {
        keyed.read(&"journal", bound, || 7).await
    });
    run_spawned().await;
    tokio::time::advance(bound / 2).await;
    drop(held);
    let value = waiter
        .await
        .unwrap_or_else(|e| panic!("waiter task failed: {e}"));
    assert_eq!(value, Ok(7));
    assert_eq!(keyed.stats_for(&"journal").map(|s| s.refusals), Some(1));
}

/// A zero wait is one attempt: admitted when a slot is free, refused at once otherwise.
#[tokio::test(start_paused = true)]
async fn zero_wait_is_a_single_attempt() {
    let keyed = one_slot_journal();
    assert_eq!(read_now(&keyed, "journal", 1).await, Ok(1));
    let _held = keyed.admit(&"journal", Duration::ZERO).await;
    let refused = read_now(&keyed, "journal", 2).await;
    assert!(matches!(refused, Err(KeyedError::Refused { .. })));
}

// ---------------------------------------------------------------------------------------------
// The permit lives in the closure
// ---------------------------------------------------------------------------------------------

/// A caller whose future is dropped mid-run keeps its slot until its closure ends: a second
/// call in the same share (through an alias, too) cannot overlap it.
#[tokio::test(start_paused = true)]
async fn dropped_caller_keeps_its_slot_until_the_closure_ends() {
    let keyed = one_slot_journal();
    let active = Arc::new(AtomicUsize::new(0));
    let overlapped = Arc::new(AtomicBool::new(false));
    // Mutates `key` in a task of its own, running `inner` and noting any overlap.
    let spawn_tracked = |key: &'static str, wait: Duration, inner: Box<dyn FnOnce() + Send>| {
        let (active, overlapped) = (Arc::clone(&active), Arc::clone(&overlapped));
        let tracked = move || {
            if active.fetch_add(1, Ordering::SeqCst) != 0 {
                overlapped.store(true, Ordering::SeqCst);
            }
            inner();
            active.fetch_sub(1, Ordering::SeqCst);
        };
        spawn_with(&keyed, move |keyed| async move {
            keyed.mutate(&key, wait, tracked).await
        })
    };

    let (hold, work) = hold();
    let first = spawn_tracked("journal", LONG, Box::new(work));
    let started = hold.started.await;
    assert!(started.is_ok(), "the first closure did not start");

    // The caller gives up mid-run.
    first.abort();
    let aborted = first.await;
    assert!(aborted.is_err_and(|e| e.is_cancelled()));
    assert_eq!(keyed.stats_for(&"journal").map(|s| s.in_use), Some(1));

    // A second call cannot get in while the first closure still runs.
    let second = spawn_tracked("ledger", Duration::from_millis(30), Box::new(|| ()));
    run_spawned().await;
    // The blocking closure inhibits auto-advance; move the paused clock past the bound.
    tokio::time::advance(Duration::from_millis(31)).await;
    let second = second
        .await
        .unwrap_or_else(|e| panic!("second task failed: {e}"));
    assert!(matches!(
        second,
        Err(KeyedError::Refused { key: "ledger", .. })
    ));

    // A third call waits as long as it takes; it gets in only after the first closure ends.
    let third = spawn_tracked("journal", LONG, Box::new(|| ()));
    run_spawned().await;
    assert_eq!(keyed.stats_for(&"journal").map(|s| s.waiting), Some(1));
    let _ = hold.release.send(());
    let third = third
        .await
        .unwrap_or_else(|e| panic!("third task failed: {e}"));
    assert_eq!(third, Ok(()));
    assert!(
        !overlapped.load(Ordering::SeqCst),
        "two closures of one share overlapped"
    );
    assert_eq!(keyed.stats_for(&"journal").map(|s| s.in_use), Some(0));
}

/// A panicking closure frees its slot; the error carries its message (also logged) and says
/// "may have applied" for a mutation, "no effect" for a read; the panic is counted against
/// the caller's key; the next call is admitted without waiting.
#[tokio::test]
async fn a_panic_frees_the_slot() {
    let keyed = one_slot_journal();
    let (logs, _guard) = capture_logs();
    let mutation = keyed
        .mutate(&"ledger", LONG, || -> u8 { inject("mutation mid-commit") })
        .await;
    match &mutation {
        Err(KeyedError::Panicked { key, reach, panic }) => {
            assert_eq!((*key, *reach), ("ledger", Reach::MaybeApplied));
            assert!(panic.message().contains("mutation mid-commit exploded"));
        }
        other => panic!("expected a panic, got {other:?}"),
    }
    assert!(!mutation.is_err_and(|e| e.reach().retry_is_safe()));
    assert_eq!(keyed.stats_for(&"journal").map(|s| s.in_use), Some(0));
    assert!(
        logs.text().contains("mutation mid-commit exploded"),
        "the message is logged: {}",
        logs.text()
    );

    let read = keyed
        .read(&"journal", LONG, || -> u8 { inject("read") })
        .await;
    assert!(
        matches!(
            &read,
            Err(KeyedError::Panicked {
                key: "journal",
                reach: Reach::NotSent,
                ..
            })
        ),
        "{read:?}"
    );
    assert!(read.is_err_and(|e| e.reach().retry_is_safe()));
    let panics = |key| keyed.stats_for(&key).map(|s| s.panics);
    assert_eq!((panics("ledger"), panics("journal")), (Some(1), Some(1)));

    // Zero wait: this succeeds only if the slot is free right now.
    let next = keyed.mutate(&"journal", Duration::ZERO, || 5).await;
    assert_eq!(next, Ok(5));
}

/// A caller that stops waiting (its task aborted while its closure runs) does not take the
/// panic's accounting with it: the closure's later panic is counted against the caller's key
/// and logged (to the subscriber that was the caller's default), before its slot is freed.
#[tokio::test]
async fn an_abandoned_calls_panic_is_counted_and_logged() {
    let keyed = Arc::new(one_slot_journal());
    let (logs, _guard) = capture_logs();
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let caller = {
        let keyed = Arc::clone(&keyed);
        tokio::spawn(async move {
            keyed
                .mutate(&"ledger", LONG, move || -> u8 {
                    let _ = started_tx.send(());
                    let _ = wait_go.recv();
                    inject("abandoned mutation")
                })
                .await
        })
    };
    started.await.expect("the closure starts");
    caller.abort();
    assert!(caller.await.is_err_and(|e| e.is_cancelled()));
    let stats = |key| keyed.stats_for(&key).map(|s| (s.in_use, s.panics));
    assert_eq!(
        stats("ledger"),
        Some((1, 0)),
        "the slot is held while the closure runs"
    );

    go.send(()).expect("the closure waits");
    // The slot is freed after the panic is counted: wait for the one, then read the other.
    while keyed.stats_for(&"ledger").map(|s| s.in_use) != Some(0) {
        tokio::task::yield_now().await;
    }
    assert_eq!(stats("ledger"), Some((0, 1)));
    let text = logs.text();
    assert!(
        text.contains("keyed blocking work panicked")
            && text.contains("abandoned mutation exploded"),
        "the panic is logged to the caller's subscriber: {text}"
    );
    assert!(text.contains("ledger"), "the log names the key: {text}");
}

/// Calls on two small shares (one aliased) from many tasks on two workers, with one closure in
/// five panicking: every call ends with its value or a `Panicked` of the right reach, nothing
/// is refused or lost, every slot comes back, and each key counted exactly its own panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_storm_keeps_exact_accounting() {
    watch_panics();
    let keyed = Keyed::builder()
        .share("journal", 2)
        .alias("ledger", "journal")
        .share("index", 1)
        .build();
    let keyed = Arc::new(built(keyed));
    let keys = ["journal", "ledger", "index"];
    let tasks: Vec<_> = (0..6)
        .map(|task| {
            spawn_with(&keyed, move |keyed| async move {
                let mut thrown = [0u64; 3];
                let mut ok = 0u64;
                for call in 0..150u64 {
                    let k = ((call + task) % 3) as usize;
                    let mutation = call % 2 == 0;
                    let explodes = (call * 7 + task * 3) % 5 == 0;
                    thrown[k] += u64::from(explodes);
                    let work = move || {
                        if explodes {
                            inject("storm closure");
                        }
                        call
                    };
                    let span = tracing::Span::none();
                    let result = if mutation {
                        keyed.mutate_in(&keys[k], LONG, span, work).await
                    } else {
                        keyed.read_in(&keys[k], LONG, span, work).await
                    };
                    match result {
                        Ok(value) => {
                            assert!(!explodes);
                            assert_eq!(value, call);
                            ok += 1;
                        }
                        Err(KeyedError::Panicked { key, reach, .. }) => {
                            assert!(explodes);
                            assert_eq!(key, keys[k]);
                            let want = if mutation {
                                Reach::MaybeApplied
                            } else {
                                Reach::NotSent
                            };
                            assert_eq!(reach, want);
                        }
                        Err(other) => panic!("unexpected {other}"),
                    }
                }
                (thrown, ok)
            })
        })
        .collect();
    let mut thrown = [0u64; 3];
    let mut ok = 0;
    for (task_thrown, task_ok) in join_all(tasks).await {
        for k in 0..3 {
            thrown[k] += task_thrown[k];
        }
        ok += task_ok;
    }
    assert_eq!(ok + thrown.iter().sum::<u64>(), 6 * 150);
    for (k, key) in keys.iter().enumerate() {
        let stats = keyed.stats_for(key).expect("registered");
        assert_eq!(stats.panics, thrown[k], "{key}");
        assert_eq!(
            (stats.in_use, stats.waiting, stats.refusals),
            (0, 0, 0),
            "{key}"
        );
    }
    assert!(thrown.iter().all(|&n| n > 0), "{thrown:?}");
}

// ---------------------------------------------------------------------------------------------
// Aliasing
// ---------------------------------------------------------------------------------------------

/// Keys aliased to one share draw from one budget; a refusal names the caller's key and counts
/// against it alone; an unrelated share is untouched.
#[tokio::test(start_paused = true)]
async fn aliased_keys_share_one_budget_and_refusals_name_the_caller() {
    let keyed = Keyed::builder()
        .share("journal", 2)
        .alias("ledger", "journal")
        .alias("append", "journal")
        .share("index", 1)
        .max_blocking_threads(16)
        .build();
    let keyed = built(keyed);

    let a = keyed.admit(&"journal", LONG).await;
    let b = keyed.admit(&"append", LONG).await;
    assert!(a.is_ok() && b.is_ok());

    let bound = Duration::from_millis(10);
    let refused = keyed.mutate(&"ledger", bound, || ()).await;
    assert_eq!(
        refused,
        Err(KeyedError::Refused {
            key: "ledger",
            waited: bound,
            reach: Reach::NotSent
        })
    );
    assert_eq!(refused.as_ref().map_err(KeyedError::key), Err(&"ledger"));

    let ledger = keyed.stats_for(&"ledger");
    let ledger = ledger.unwrap_or_else(|| panic!("ledger not registered"));
    assert_eq!(ledger.share, "journal");
    assert_eq!((ledger.in_use, ledger.capacity, ledger.refusals), (2, 2, 1));
    for key in ["journal", "append", "index"] {
        assert_eq!(keyed.stats_for(&key).map(|s| s.refusals), Some(0), "{key}");
    }

    // Another share is untouched by the full one.
    assert_eq!(read_now(&keyed, "index", 1).await, Ok(1));

    // Freeing one slot of the share admits any of its keys.
    drop(a);
    assert_eq!(read_now(&keyed, "ledger", 2).await, Ok(2));
    drop(b);
    let order: Vec<&str> = keyed.stats().iter().map(|s| s.key).collect();
    assert_eq!(order, ["journal", "index", "ledger", "append"]);
}

/// An unregistered key is refused without running anything.
#[tokio::test]
async fn unregistered_key_is_not_run() {
    let keyed = one_slot_journal();
    let ran = Arc::new(AtomicBool::new(false));
    let ran_in = Arc::clone(&ran);
    let result = keyed
        .mutate(&"jornal", LONG, move || {
            ran_in.store(true, Ordering::SeqCst)
        })
        .await;
    assert_eq!(
        result,
        Err(KeyedError::Unregistered {
            key: "jornal",
            reach: Reach::NotSent
        })
    );
    assert!(!ran.load(Ordering::SeqCst));
}

/// `close` wakes a waiting call with `Closed` (not run); work already running finishes.
#[tokio::test(start_paused = true)]
async fn close_refuses_waiters_and_lets_running_work_finish() {
    let keyed = one_slot_journal();
    let (hold, work) = hold();
    let running = spawn_with(&keyed, |keyed| async move {
        keyed.mutate(&"journal", LONG, work).await
    });
    let _ = hold.started.await;
    let waiter = spawn_with(&keyed, |keyed| async move {
        keyed.read(&"ledger", LONG, || ()).await
    });
    run_spawned().await;
    keyed.close();
    let waiter = waiter
        .await
        .unwrap_or_else(|e| panic!("waiter task failed: {e}"));
    assert_eq!(
        waiter,
        Err(KeyedError::Closed {
            key: "ledger",
            reach: Reach::NotSent
        })
    );
    let _ = hold.release.send(());
    let running = running
        .await
        .unwrap_or_else(|e| panic!("running task failed: {e}"));
    assert_eq!(running, Ok(()));
    assert_eq!(keyed.stats_for(&"journal").map(|s| s.in_use), Some(0));
    // Registration after close yields closed shares.
    assert_eq!(keyed.register("late", 1), Ok(()));
    let late = keyed.admit(&"late", Duration::ZERO).await;
    assert!(matches!(late, Err(KeyedError::Closed { key: "late", .. })));
}

// ---------------------------------------------------------------------------------------------
// Tracing
// ---------------------------------------------------------------------------------------------

/// The caller's span is entered inside the closure, on the blocking thread.
///
/// The blocking thread has no thread-local subscriber, so this test installs the process-wide
/// one (a bare registry, which tracks the current span per thread). It is the only test here
/// that touches the global default.
#[tokio::test]
async fn the_span_is_current_inside_the_closure() {
    let installed =
        tracing::subscriber::set_global_default(tracing_subscriber::registry::Registry::default());
    assert!(
        installed.is_ok(),
        "another test installed a global subscriber"
    );

    let keyed = one_slot_journal();
    let span = tracing::info_span!("keyed-test-request", request_id = 17_u64);
    let expected = span.id();
    assert!(expected.is_some(), "the registry did not enable the span");
    let caller_thread = std::thread::current().id();

    let seen = keyed
        .mutate_in(&"ledger", LONG, span, move || {
            let current = tracing::Span::current();
            (
                current.id(),
                current.metadata().map(|m| m.name()),
                std::thread::current().id(),
            )
        })
        .await;
    let (id, name, thread) = seen.unwrap_or_else(|e| panic!("call failed: {e}"));
    assert_eq!(id, expected);
    assert_eq!(name, Some("keyed-test-request"));
    assert_ne!(
        thread, caller_thread,
        "the closure did not run on a blocking thread"
    );
    // And nothing is left entered on the caller's side.
    assert!(tracing::Span::current().id().is_none());
}

/// The refusal warning names the caller's key, its share and the wait bound, and carries no
/// request contents (neither the closure's data nor the request span's fields).
#[tokio::test(start_paused = true)]
async fn a_refusal_log_carries_no_request_contents() {
    // Thread-local: the refusal is logged on this (current-thread runtime's) thread.
    let (captured, _default) = capture_logs();

    let keyed = one_slot_journal();
    let _held = keyed.admit(&"journal", LONG).await;
    let secret = String::from("SECRET-PAYLOAD-4f1c");
    let span = tracing::info_span!("request", body = %secret);
    let refused = keyed
        .mutate_in(&"ledger", Duration::from_millis(25), span, move || {
            secret.len()
        })
        .await;
    assert!(matches!(refused, Err(KeyedError::Refused { .. })));

    let text = captured.text();
    let warning = text
        .lines()
        .find(|line| line.contains("WARN") && line.contains("refused"));
    let warning = warning.unwrap_or_else(|| panic!("no refusal warning in {text:?}"));
    assert!(warning.contains("key=\"ledger\""), "{warning}");
    assert!(warning.contains("share=\"journal\""), "{warning}");
    assert!(warning.contains("max_wait=25ms"), "{warning}");
    assert!(!text.contains("SECRET"), "request contents leaked: {text}");
    if let Err(error) = refused {
        assert!(!error.to_string().contains("SECRET"));
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration and the R2 census
// ---------------------------------------------------------------------------------------------

/// R2's families: nine shares (each the family that owns a lock), ten more families aliased
/// onto them because they serialize on the same lock. 19 caller keys, 9 shares.
const R2_SHARES: [(&str, Option<usize>); 9] = [
    ("journal", None),
    ("snapshot", None),
    ("replay", Some(4)),
    ("index", None),
    ("lease", None),
    ("membership", None),
    ("blob", None),
    ("config", None),
    ("audit", None),
];
const R2_ALIASES: [(&str, &str); 10] = [
    ("ledger", "journal"),
    ("append", "journal"),
    ("truncate", "journal"),
    ("restore", "snapshot"),
    ("catch-up", "replay"),
    ("reindex", "index"),
    ("renew", "lease"),
    ("revoke", "lease"),
    ("gc", "blob"),
    ("audit-query", "audit"),
];
/// R2's bound: the sum of all shares stays below the blocking pool's 128 threads.
const R2_THREADS: usize = 128;

fn r2_builder() -> slotpool::keyed::KeyedBuilder<&'static str> {
    let mut builder = Keyed::builder().default_share(slotpool::keyed::DEFAULT_SHARE);
    for (key, share) in R2_SHARES {
        builder = match share {
            Some(slots) => builder.share(key, slots),
            None => builder.family(key),
        };
    }
    for (alias, share) in R2_ALIASES {
        builder = builder.alias(alias, share);
    }
    builder
}

/// R2's static census: the distinct share keys after aliasing, and their sum, which fits the
/// blocking pool (R2's `sum < 128` is `sum + 1 reserved <= 128`).
#[test]
fn r2_census_distinct_shares_and_their_sum_fit_the_pool() {
    let built = r2_builder()
        .max_blocking_threads(R2_THREADS)
        .reserved_threads(1)
        .build();
    let keyed = built.unwrap_or_else(|e| panic!("R2 configuration refused: {e}"));

    let stats = keyed.stats();
    assert_eq!(stats.len(), 19, "caller keys");
    let mut distinct: Vec<&str> = stats.iter().map(|s| s.share).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let mut expected: Vec<&str> = R2_SHARES.iter().map(|(k, _)| *k).collect();
    expected.sort_unstable();
    assert_eq!(distinct, expected, "distinct share keys after aliasing");

    let census = keyed.shares();
    assert_eq!(census.len(), 9);
    let sum: usize = census.iter().map(|(_, slots)| slots).sum();
    assert_eq!(sum, 8 * slotpool::keyed::DEFAULT_SHARE + 4);
    assert_eq!(sum, 68);
    assert_eq!(keyed.total_shares(), sum);
    assert!(sum < R2_THREADS);
    assert!(keyed.total_shares() + keyed.reserved_threads() <= keyed.max_blocking_threads());
    for (alias, share) in R2_ALIASES {
        assert_eq!(keyed.share_of(&alias), Some(share));
        assert_eq!(
            keyed.stats_for(&alias).map(|s| s.capacity),
            keyed.stats_for(&share).map(|s| s.capacity)
        );
    }
}

/// A configuration that does not fit the pool, or has a zero or unknown share, is a typed error.
#[test]
fn bad_configurations_are_typed_errors() {
    assert_eq!(
        r2_builder()
            .max_blocking_threads(68)
            .reserved_threads(1)
            .build()
            .err(),
        Some(BuildError::DoesNotFit {
            shares: 68,
            reserved: 1,
            max_blocking_threads: 68
        })
    );
    assert!(r2_builder()
        .max_blocking_threads(68)
        .reserved_threads(0)
        .build()
        .is_ok());
    assert_eq!(
        Keyed::builder().share("journal", 0).build().err(),
        Some(BuildError::InvalidShare {
            key: "journal",
            error: ConfigError::Zero("capacity")
        })
    );
    assert_eq!(
        Keyed::<&str>::builder().default_share(0).build().err(),
        Some(BuildError::Config(ConfigError::Zero("default_share")))
    );
    assert_eq!(
        Keyed::<&str>::builder()
            .max_blocking_threads(0)
            .build()
            .err(),
        Some(BuildError::Config(ConfigError::Zero(
            "max_blocking_threads"
        )))
    );
    assert_eq!(
        Keyed::builder().alias("ledger", "journal").build().err(),
        Some(BuildError::UnknownShare {
            alias: "ledger",
            share: "journal"
        })
    );
    // An alias must name a share, not another alias.
    assert_eq!(
        Keyed::builder()
            .family("journal")
            .alias("ledger", "journal")
            .alias("append", "ledger")
            .build()
            .err(),
        Some(BuildError::UnknownShare {
            alias: "append",
            share: "ledger"
        })
    );
    assert_eq!(
        Keyed::builder()
            .family("journal")
            .alias("journal", "journal")
            .build()
            .err(),
        Some(BuildError::Duplicate { key: "journal" })
    );
    assert_eq!(
        Keyed::builder()
            .share("journal", slotpool::keyed::MAX_SHARE + 1)
            .build()
            .err(),
        Some(BuildError::InvalidShare {
            key: "journal",
            error: ConfigError::TooLarge {
                name: "capacity",
                value: slotpool::keyed::MAX_SHARE as u64 + 1,
                max: slotpool::keyed::MAX_SHARE as u64
            }
        })
    );
    // Overflowing sums do not fit either.
    assert!(matches!(
        Keyed::builder()
            .share("a", slotpool::keyed::MAX_SHARE)
            .share("b", slotpool::keyed::MAX_SHARE)
            .reserved_threads(usize::MAX)
            .max_blocking_threads(usize::MAX)
            .build(),
        Err(BuildError::DoesNotFit { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Run-time registration
// ---------------------------------------------------------------------------------------------

/// Keys registered while other tasks look keys up: lookups never fail or block, a new alias
/// shares its share's budget, and a registration that would not fit leaves the registry as it
/// was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_time_registration_is_safe_under_concurrent_lookups() {
    let keyed = Keyed::builder()
        .share("journal".to_string(), 4)
        .max_blocking_threads(64)
        .build();
    let keyed = Arc::new(built(keyed));
    let stop = Arc::new(AtomicBool::new(false));

    let mut lookers = Vec::new();
    for _ in 0..4 {
        let stop = Arc::clone(&stop);
        lookers.push(spawn_with(&keyed, |keyed| async move {
            let key = "journal".to_string();
            let mut admitted = 0u64;
            while !stop.load(Ordering::SeqCst) {
                match keyed.admit(&key, LONG).await {
                    Ok(admission) => {
                        admitted += 1;
                        drop(admission);
                    }
                    Err(error) => panic!("lookup failed during registration: {error}"),
                }
                tokio::task::yield_now().await;
            }
            admitted
        }));
    }

    for i in 0..60 {
        let key = format!("family-{i}");
        assert_eq!(keyed.register(key.clone(), 1), Ok(()));
        assert_eq!(
            keyed.register_alias(format!("alias-{i}"), key.clone()),
            Ok(())
        );
        tokio::task::yield_now().await;
    }
    // 4 + 60 = 64 slots: the pool is full; one more does not fit and changes nothing.
    assert_eq!(keyed.total_shares(), 64);
    assert_eq!(
        keyed.register_default("one-too-many".to_string()),
        Err(BuildError::DoesNotFit {
            shares: 64 + slotpool::keyed::DEFAULT_SHARE,
            reserved: 0,
            max_blocking_threads: 64
        })
    );
    assert_eq!(keyed.share_of(&"one-too-many".to_string()), None);
    assert_eq!(
        keyed.register("journal".to_string(), 1),
        Err(BuildError::Duplicate {
            key: "journal".to_string()
        })
    );

    // A run-time alias of a build-time share draws from that share's budget.
    assert_eq!(
        keyed.register_alias("journal-replica".to_string(), "journal".to_string()),
        Ok(())
    );
    assert_eq!(
        keyed
            .stats_for(&"journal-replica".to_string())
            .map(|s| (s.share, s.capacity)),
        Some(("journal".to_string(), 4))
    );
    assert_eq!(
        keyed.register_alias("journal".to_string(), "family-1".to_string()),
        Err(BuildError::Duplicate {
            key: "journal".to_string()
        })
    );

    // A run-time alias draws from its share's budget.
    let share = keyed.admit(&"family-7".to_string(), LONG).await;
    assert!(share.is_ok());
    let alias = keyed.admit(&"alias-7".to_string(), Duration::ZERO).await;
    assert!(matches!(alias, Err(KeyedError::Refused { ref key, .. }) if key == "alias-7"));

    stop.store(true, Ordering::SeqCst);
    for looker in lookers {
        let admitted = looker
            .await
            .unwrap_or_else(|e| panic!("looker failed: {e}"));
        assert!(admitted > 0);
    }
    let keys: Vec<String> = keyed.stats().into_iter().map(|s| s.key).collect();
    assert_eq!(keys.len(), 1 + 2 * 60 + 1);
    assert_eq!(keys.first().map(String::as_str), Some("journal"));
    assert_eq!(keys.last().map(String::as_str), Some("journal-replica"));
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "metrics")]
mod metrics_export {
    use std::time::Duration;

    use slotpool::keyed::KeyedError;

    use crate::capture::Capture;
    use crate::common::keyed::one_slot_journal;

    /// Per caller key: an in-use gauge that follows admissions, and a refusal counter; both
    /// labelled with the caller's key and its share.
    #[tokio::test(start_paused = true)]
    async fn gauge_and_counter_per_key() {
        let capture = Capture::default();
        let keyed = metrics::with_local_recorder(&capture, one_slot_journal);
        let journal_gauge = "slotpool_keyed_in_use{key=journal,share=journal}";
        let ledger_refusals = "slotpool_keyed_refusals_total{key=ledger,share=journal}";

        let held = keyed.admit(&"journal", Duration::ZERO).await;
        assert!(held.is_ok());
        assert_eq!(capture.gauge(journal_gauge), 1.0);
        let refused = keyed.admit(&"ledger", Duration::from_millis(5)).await;
        assert!(matches!(
            refused,
            Err(KeyedError::Refused { key: "ledger", .. })
        ));
        assert_eq!(capture.counter(ledger_refusals), 1);
        assert_eq!(
            capture.counter("slotpool_keyed_refusals_total{key=journal,share=journal}"),
            0
        );
        drop(held);
        assert_eq!(capture.gauge(journal_gauge), 0.0);
    }
}

/// An admission reports its share's size and the slots in use with it counted; the registry
/// times waits on the clock it was given.
#[tokio::test]
async fn an_admission_reports_its_share_and_the_registry_keeps_its_clock() {
    let (clock, mock) = slotpool::Clock::mock();
    let keyed = Keyed::builder()
        .default_share(3)
        .family("journal")
        .clock(clock)
        .build()
        .unwrap();
    let first = keyed.admit(&"journal", LONG).await.unwrap();
    assert_eq!((first.capacity(), first.in_use()), (3, 1));
    let second = keyed.admit(&"journal", LONG).await.unwrap();
    assert_eq!((first.in_use(), second.in_use()), (2, 2));
    drop(first);
    assert_eq!(second.in_use(), 1);
    let start = keyed.clock().now();
    mock.advance(Duration::from_secs(42));
    assert_eq!(
        keyed.clock().now().duration_since(start),
        Duration::from_secs(42),
        "the injected mock clock"
    );
}
