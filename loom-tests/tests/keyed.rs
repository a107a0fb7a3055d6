//! Loom models of keyed admission: the route tables ([`slotpool::__internal::routes`]) and the quotas
//! ([`slotpool::__internal::quota`]) that `slotpool::keyed` admits through.
//!
//! `keyed` itself is compiled out under `cfg(slotpool_loom)` (it needs tokio's timer and
//! blocking pool); what it decides is not. An admission is [`Routes::admit`] (the lookup, the
//! alias's quota, one try) and, if the share is full, the quota's wait future; registration is
//! [`Routes::publish`] of a table change made with [`Table::add_share`] /
//! [`Table::add_alias`]; `Keyed::close` is [`Routes::close`]; dropping the `Keyed` drops its
//! `Routes`. These models call exactly those, and do with the results what the pool does:
//!
//! * the wait is polled until it resolves (`block_on`), or polled once and then **dropped**:
//!   what `tokio::time::timeout` does to it when the bound elapses, and what a caller dropping
//!   its future mid-wait does;
//! * the permit is **moved into another thread** (the blocking closure) and released there,
//!   possibly after the caller's side, or the whole registry, is gone.
//!
//! A quota's memory lives as long as any permit, wait or release can reach it; under loom its
//! allocation is kept and marked freed instead, and every release checks the mark, so a use
//! after the free fails the model rather than going unseen.
//!
//! Every model counts, outside loom's state, the executions it explored and the times the path
//! it is named for was taken, and fails if it explored only one execution or never took it.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release
//! -p slotpool-loom-tests --test keyed --target-dir target/loom`.
#![cfg(slotpool_loom)]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use slotpool::__internal::quota::{Freer, Quota, QuotaPermit};
use slotpool::__internal::routes::{First, Routes, Table};
use slotpool_loom_tests::model;

/// The keyed pool's per-key state stands in as nothing: the models check routing and quotas.
type Keys = Routes<&'static str, ()>;

/// "journal", a share of `slots`, with "ledger" aliased onto it.
fn journal(slots: usize) -> Arc<Keys> {
    let mut table = Table::new();
    let no_state = |_: &&str, _: &&str| ();
    assert!(table.add_share(None, "journal", slots, no_state).is_ok());
    assert!(table.add_alias(None, "ledger", "journal", no_state).is_ok());
    Arc::new(Routes::new(table))
}

/// Joins a model thread, re-raising its panic so a failed assertion fails the model.
fn join<T>(handle: thread::JoinHandle<T>) -> T {
    match handle.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// `Keyed::admit` without a deadline: the first attempt, then (share full) the wait. Returns
/// the permit and whether it had to wait.
fn admit(keys: &Keys, key: &'static str) -> (QuotaPermit, bool) {
    match keys.admit(&key, |permit, _| permit) {
        First::Admitted(permit) => (permit, false),
        First::Wait(route) => match loom::future::block_on(route.quota().acquire()) {
            Ok(permit) => (permit, true),
            Err(closed) => panic!("{key}: closed unexpectedly: {closed}"),
        },
        other => panic!("{key}: {other:?}"),
    }
}

/// The quota a permit came from, readable after its owner is gone: under loom a quota's
/// allocation is never given back, only marked freed.
fn quota_of(permit: &QuotaPermit) -> &'static Quota {
    let quota: *const Quota = permit.quota();
    // SAFETY: under `cfg(slotpool_loom)` a quota's allocation is leaked rather than freed
    // (see `slotpool::__internal::quota`), so the pointer stays valid for the rest of the process.
    unsafe { &*quota }
}

/// Two callers, one through the share key and one through its alias, contend for a share of
/// one, each through the fast path and, failing that, the wait. Both get in, never at the
/// same time, and the permit is back afterwards.
#[test]
fn share_of_one_admits_one_at_a_time() {
    let reach = model(|reach| {
        let keys = journal(1);
        let inside = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = ["journal", "ledger"]
            .into_iter()
            .map(|key| {
                let keys = Arc::clone(&keys);
                let inside = Arc::clone(&inside);
                thread::spawn(move || {
                    let (permit, waited) = admit(&keys, key);
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "share overshot");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                    waited
                })
            })
            .collect();
        let waited = callers.into_iter().map(join).filter(|&w| w).count();
        if waited > 0 {
            reach.hit("a caller waited for the share");
        }
        keys.with_route(&"journal", |route| {
            let quota = route.expect("registered").quota();
            assert_eq!((quota.available(), quota.waiting()), (1, 0));
        });
    });
    reach
        .explored(2)
        .reached_all(&["a caller waited for the share"]);
}

/// A waiter polled once and then dropped (its timeout fired) while the holder releases: the
/// release's wake-up (or the permit it handed over), if it went to the dropped waiter, passes
/// to the other waiter, which must get in (loom reports a deadlock otherwise), and no permit
/// leaks.
#[test]
fn timed_out_waiter_passes_its_wake_up_on() {
    let reach = model(|reach| {
        let keys = journal(1);
        let (held, _) = admit(&keys, "journal");

        let timed_out = {
            let keys = Arc::clone(&keys);
            thread::spawn(move || {
                let First::Wait(route) = keys.admit(&"ledger", |permit, _| permit) else {
                    return false;
                };
                let mut wait = pin!(route.quota().acquire());
                let mut cx = Context::from_waker(Waker::noop());
                // One poll, then the deadline: `timeout` drops the inner future.
                match wait.as_mut().poll(&mut cx) {
                    Poll::Ready(result) => {
                        drop(result);
                        false
                    }
                    Poll::Pending => true,
                }
            })
        };
        let patient = {
            let keys = Arc::clone(&keys);
            thread::spawn(move || admit(&keys, "journal").1)
        };

        drop(held);
        let queued = join(timed_out);
        let waited = join(patient);
        if queued && waited {
            reach.hit("the timed-out waiter queued and the patient one was woken");
        }
        keys.with_route(&"journal", |route| {
            let quota = route.expect("registered").quota();
            assert_eq!((quota.available(), quota.waiting()), (1, 0));
        });
    });
    reach
        .explored(2)
        .reached_all(&["the timed-out waiter queued and the patient one was woken"]);
}

/// The permit moves into the blocking closure's thread and is released there when the work
/// ends; the caller's side has already gone. A second caller waiting on the share gets in only
/// after the work finished (no overlap), and does get in (the release from the other thread
/// wakes it).
#[test]
fn permit_moved_into_the_closure_holds_until_the_work_ends() {
    let reach = model(|reach| {
        let keys = journal(1);
        let work_done = Arc::new(AtomicBool::new(false));

        let (permit, _) = admit(&keys, "ledger");
        let blocking = {
            let work_done = Arc::clone(&work_done);
            thread::spawn(move || {
                let _permit = permit; // moved in: held until the work ends
                work_done.store(true, Ordering::SeqCst);
            })
        };
        // The first caller's future is gone; the second call waits on the share.
        let (second, waited) = admit(&keys, "journal");
        assert!(
            work_done.load(Ordering::SeqCst),
            "admitted while the work still held the slot"
        );
        if waited {
            reach.hit("an admission waited for the work to end");
        }
        drop(second);
        join(blocking);
        keys.with_route(&"journal", |route| {
            assert_eq!(route.expect("registered").quota().available(), 1);
        });
    });
    reach
        .explored(2)
        .reached_all(&["an admission waited for the work to end"]);
}

/// `close` races a parked waiter and a release: the waiter ends (with a permit or with
/// `Closed`), never sleeps through the close, and the permit count is whole afterwards.
#[test]
fn close_races_a_waiter_and_a_release() {
    let reach = model(|reach| {
        let keys = journal(1);
        let (held, _) = admit(&keys, "journal");
        let waiter = {
            let keys = Arc::clone(&keys);
            thread::spawn(move || match keys.admit(&"ledger", |permit, _| permit) {
                First::Admitted(_) => None,
                First::Closed => Some(false),
                First::Wait(route) => {
                    // Ok (got the released permit first) or Err(Closed); either ends the wait.
                    Some(loom::future::block_on(route.quota().acquire()).is_ok())
                }
                First::Unregistered => panic!("ledger is registered"),
            })
        };
        keys.close();
        drop(held);
        match join(waiter) {
            Some(true) => reach.hit("the waiter got the released permit"),
            Some(false) => reach.hit("the waiter was closed out"),
            None => {}
        }
        assert!(matches!(keys.admit(&"journal", |p, _| p), First::Closed));
        keys.with_route(&"journal", |route| {
            let quota = route.expect("registered").quota();
            assert!(quota.is_closed());
            assert_eq!(quota.available(), 1);
        });
    });
    reach.explored(2).reached_all(&[
        "the waiter got the released permit",
        "the waiter was closed out",
    ]);
}

/// The registry is dropped while a permit, moved into a blocking closure, is still out: the
/// quota outlives the registry until that permit is released, and is freed exactly once, by
/// whichever of the two goes last, after its last access (a release after the free would fail
/// the model in the quota's own check).
#[test]
fn registry_dropped_while_a_permit_is_out() {
    let reach = model(|reach| {
        let keys = journal(2);
        let (permit, _) = admit(&keys, "ledger");
        let quota = quota_of(&permit);
        let blocking = thread::spawn(move || drop(permit));
        drop(keys);
        join(blocking);
        match quota.freed_by() {
            Some(Freer::Owner) => reach.hit("the owner freed the quota"),
            Some(Freer::FastRelease) => reach.hit("the fast release freed the quota"),
            other => panic!("freed by {other:?}"),
        }
    });
    reach.explored(2).reached_all(&[
        "the owner freed the quota",
        "the fast release freed the quota",
    ]);
}

/// The registry is dropped while the last permit's release takes the slow path (a waiter was
/// counted when it looked, and has since been served and gone): the slow release keeps the
/// quota alive until its last access, and exactly one party frees it.
#[test]
fn registry_dropped_during_a_slow_release() {
    let reach = model(|reach| {
        let keys = journal(1);
        let (held, _) = admit(&keys, "journal");
        let quota = quota_of(&held);
        let waiter = {
            let keys = Arc::clone(&keys);
            thread::spawn(move || drop(admit(&keys, "ledger")))
        };
        let releaser = thread::spawn(move || drop(held));
        join(waiter);
        drop(keys);
        join(releaser);
        match quota.freed_by() {
            Some(Freer::SlowRelease) => reach.hit("the slow release freed the quota"),
            Some(_) => {}
            None => panic!("never freed"),
        }
    });
    reach
        .explored(2)
        .reached_all(&["the slow release freed the quota"]);
}

/// An alias registered at run time while callers admit through it and through its share: a
/// lookup sees the key unregistered (before) or routed to the share's own quota (after),
/// never a quota of its own, so a share of one never admits two.
#[test]
fn alias_registration_racing_admission() {
    let reach = model(|reach| {
        let keys = journal(1);
        let inside = Arc::new(AtomicUsize::new(0));
        let registrar = {
            let keys = Arc::clone(&keys);
            thread::spawn(move || {
                let published = keys.publish(|table, fixed| {
                    table.add_alias(Some(fixed), "append", "journal", |_, _| ())
                });
                assert!(published.is_ok());
            })
        };
        let holder = {
            let (keys, inside) = (Arc::clone(&keys), Arc::clone(&inside));
            thread::spawn(move || {
                let (permit, _) = admit(&keys, "journal");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "share overshot");
                inside.fetch_sub(1, Ordering::SeqCst);
                drop(permit);
            })
        };
        match keys.admit(&"append", |permit, _| permit) {
            First::Unregistered => reach.hit("the admission came before the registration"),
            First::Admitted(permit) => {
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "share overshot");
                inside.fetch_sub(1, Ordering::SeqCst);
                drop(permit);
                reach.hit("the admission went through the new alias");
            }
            First::Wait(route) => {
                let _permit = loom::future::block_on(route.quota().acquire());
                reach.hit("the admission went through the new alias");
            }
            First::Closed => panic!("nobody closed it"),
        }
        join(registrar);
        join(holder);
        // Registered now, and on the share's quota.
        keys.with_route(&"append", |route| {
            let route = route.expect("registered");
            assert_eq!(*route.share(), "journal");
            assert_eq!(route.quota().capacity(), 1);
        });
        assert!(matches!(
            keys.admit(&"append", |p, _| p),
            First::Admitted(_)
        ));
    });
    reach.explored(2).reached_all(&[
        "the admission came before the registration",
        "the admission went through the new alias",
    ]);
}

/// Registers `key` as a share of one, at run time, on a thread of its own.
fn register_share_on_a_thread(keys: &Arc<Keys>, key: &'static str) -> thread::JoinHandle<()> {
    let keys = Arc::clone(keys);
    thread::spawn(move || {
        let published =
            keys.publish(|table, fixed| table.add_share(Some(fixed), key, 1, |_, _| ()));
        assert!(published.is_ok());
    })
}

/// A share registered at run time while the registry is closed: whichever goes first, the new
/// share ends closed (no caller is admitted by a quota published after the close).
#[test]
fn registration_racing_close() {
    let reach = model(|reach| {
        let keys = journal(1);
        let registrar = register_share_on_a_thread(&keys, "index");
        keys.close();
        let registered_first = keys.with_route(&"index", |route| route.is_some());
        join(registrar);
        assert!(matches!(keys.admit(&"index", |p, _| p), First::Closed));
        if !registered_first {
            // The close ran before the registration published: the publication closed it.
            reach.hit("the close ran before the registration published");
        }
    });
    reach
        .explored(2)
        .reached_all(&["the close ran before the registration published"]);
}

/// Two registrations at once (a share and an alias of a build-time share): each publication
/// copies the table the other published, so both keys land, and the alias draws from its
/// share's quota.
#[test]
fn concurrent_registrations_both_land() {
    let reach = model(|reach| {
        let keys = journal(1);
        let registrar = register_share_on_a_thread(&keys, "index");
        let published = keys
            .publish(|table, fixed| table.add_alias(Some(fixed), "append", "journal", |_, _| ()));
        assert!(published.is_ok());
        let index_first = keys.with_route(&"index", |route| route.is_some());
        join(registrar);
        for key in ["index", "append"] {
            assert!(
                keys.with_route(&key, |route| route.is_some()),
                "{key} was lost"
            );
        }
        let (held, _) = admit(&keys, "journal");
        assert!(matches!(keys.admit(&"append", |p, _| p), First::Wait(_)));
        drop(held);
        if index_first {
            reach.hit("the index registration landed first");
        }
    });
    reach
        .explored(2)
        .reached_all(&["the index registration landed first"]);
}
