//! Cancelling a managed `get` at each of its awaits (polled once, then dropped): while it
//! waits, while an object is handed to it, while it creates (the creation finishes off the
//! caller, or is dropped without a runtime) and while it recycles (the object is dropped). In
//! every case nothing is lost or counted twice: the books balance and the pool serves on.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::common::managed::{Act, Fixture, Injected, Scripted};
use crate::common::{poll_once, run_spawned, settle_until};
use slotpool::managed::{Object, PoolError};
use tokio::task::JoinHandle;

type Get<'a> = Pin<Box<dyn Future<Output = Result<Object<Scripted>, PoolError<Injected>>> + 'a>>;

/// One object, held; a first waiter polled once (queued), and a second waiting in a task for
/// the object's id.
async fn two_waiters(f: &Fixture) -> (Object<Scripted>, Get<'_>, JoinHandle<u64>) {
    let held = f.pool.get().await.unwrap();
    let mut first: Get<'_> = Box::pin(f.pool.get());
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(first.as_mut().poll(&mut cx), Poll::Pending));
    let second = {
        let pool = f.pool.clone();
        tokio::spawn(async move { pool.get().await.map(|object| object.id).unwrap() })
    };
    run_spawned().await;
    assert_eq!(f.pool.status().waiting, 2);
    (held, first, second)
}

/// Dropped while waiting: it takes nothing, and the object it waited for goes idle.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn cancelled_while_waiting_takes_nothing() {
    let f = Fixture::new(1);
    let held = f.pool.get().await.unwrap();
    {
        let mut get = pin!(f.pool.get());
        assert!(matches!(poll_once(get.as_mut()), Poll::Pending));
        assert_eq!(f.pool.status().waiting, 1);
    }
    assert_eq!(
        f.pool.status().waiting,
        0,
        "the dropped waiter left the queue"
    );
    drop(held);
    assert_eq!(f.pool.status().available, 1);
    assert_eq!(f.pool.get().await.unwrap().id, 0);
    f.assert_balanced();
}

/// A waiter is handed the returned object and dropped before it takes it: the object goes to
/// the next waiter.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_handover_to_a_cancelled_waiter_goes_to_the_next() {
    let f = Fixture::new(1);
    let (held, first, second) = two_waiters(&f).await;
    drop(held); // handed to the first waiter, which is not polled again
    assert_eq!(
        f.pool.status().in_use,
        1,
        "the slot is the first waiter's now"
    );
    drop(first);
    assert_eq!(second.await.unwrap(), 0, "passed on to the second");
    assert_eq!(f.ledger.made(), 1);
    f.assert_balanced();
}

/// A waiter woken because an object was taken out (room to create, not a hand-over) and then
/// dropped passes the wake-up on: the next waiter creates.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_wakeup_to_a_cancelled_waiter_passes_on() {
    let f = Fixture::new(1);
    let (held, first, second) = two_waiters(&f).await;
    drop(Object::take(held)); // frees the room and wakes the first waiter
    drop(first);
    assert_eq!(second.await.unwrap(), 1, "the second waiter created");
    f.assert_balanced();
}

/// Dropped while creating: the creation finishes on the pool's task and the object lands
/// idle, or with the oldest waiter.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn cancelled_while_creating_the_creation_finishes_off_the_caller() {
    let f = Fixture::new(1);
    f.script.creates(&[Act::Hang]);
    {
        let mut get = pin!(f.pool.get());
        assert!(matches!(poll_once(get.as_mut()), Poll::Pending));
    }
    assert_eq!(f.pool.status().size, 1, "the creation still holds its room");
    let waiter = {
        let pool = f.pool.clone();
        tokio::spawn(async move { pool.get().await.map(|object| object.id) })
    };
    run_spawned().await;
    assert_eq!(f.pool.status().waiting, 1);
    f.script.create_gate.add_permits(1);
    assert_eq!(
        waiter.await.unwrap().unwrap(),
        0,
        "handed the finished object"
    );
    let stats = f.pool.stats();
    assert_eq!((stats.created, stats.created_off_caller), (1, 1));
    f.assert_balanced();
}

/// Dropped while creating, with no runtime to finish it on: the creation is dropped and its
/// room given back.
#[test]
fn cancelled_while_creating_without_a_runtime_frees_the_room() {
    let f = Fixture::new(1);
    f.script.creates(&[Act::Hang]);
    {
        let mut get = pin!(f.pool.get());
        assert!(matches!(poll_once(get.as_mut()), Poll::Pending));
    }
    let stats = f.pool.stats();
    assert_eq!(
        (stats.status.size, stats.create_failures),
        (0, 1),
        "{stats:?}"
    );
    assert_eq!(f.ledger.made(), 0);
    let mut get = pin!(f.pool.get());
    assert!(
        matches!(poll_once(get.as_mut()), Poll::Ready(Ok(_))),
        "the room is free"
    );
}

/// Dropped while recycling: the object, whose state is unknown, is dropped and its room
/// given back.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn cancelled_while_recycling_drops_the_object() {
    let f = Fixture::new(1);
    drop(f.pool.get().await.unwrap());
    f.script.recycles(&[Act::Hang]);
    {
        let mut get = pin!(f.pool.get());
        assert!(matches!(poll_once(get.as_mut()), Poll::Pending));
        assert_eq!(f.pool.status().in_use, 1);
    }
    assert!(f.ledger.was_dropped(0));
    let stats = f.pool.stats();
    assert_eq!((stats.status.size, stats.discarded), (0, 1), "{stats:?}");
    assert_eq!(f.pool.get().await.unwrap().id, 1);
    f.assert_balanced();
}

/// Every await, one after another on one pool: poll once, drop, and check the books each
/// time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn poll_once_then_drop_at_every_await_keeps_the_books() {
    let f = Arc::new(Fixture::new(2));
    let scenarios: [(&str, &[Act], &[Act]); 3] = [
        ("create", &[Act::Hang], &[]),
        ("recycle", &[], &[Act::Hang]),
        ("wait", &[], &[]),
    ];
    for (name, creates, recycles) in scenarios {
        let held: Vec<_> = if name == "wait" {
            vec![f.pool.get().await.unwrap(), f.pool.get().await.unwrap()]
        } else {
            Vec::new()
        };
        f.script.creates(creates);
        f.script.recycles(recycles);
        {
            let mut get = pin!(f.pool.get());
            let first = poll_once(get.as_mut());
            assert!(
                matches!(first, Poll::Pending),
                "{name}: the get must be at its await"
            );
        }
        drop(held);
        if name == "create" {
            f.script.create_gate.add_permits(1);
        }
        settle_until("the pool settled", || {
            let status = f.pool.status();
            status.in_use == 0 && status.waiting == 0
        })
        .await;
        f.assert_balanced();
        let again = f.pool.get().await.unwrap();
        drop(again);
    }
}
