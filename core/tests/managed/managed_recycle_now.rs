//! `Manager::recycle_now`, the recycle that needs no await: each sentence of its docs. A
//! decision there is the recycle (`recycle` is not called); `None` runs `recycle`; it runs
//! after the `pre_recycle` hooks and before the `post_recycle` ones, for every object a `get`
//! recycles (one it found idle, one handed to it after a wait); a rejection drops the object
//! and the `get` goes on; a panic fails the `get` as a panicking `recycle` does.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use slotpool::managed::{
    Hook, Manager, Meta, Object, Pool, PoolError, RecycleError, RecycleResult, Step,
};

/// What `recycle_now` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Now {
    /// `None`: leave it to `recycle`.
    Defer,
    /// `Some(Ok(()))`.
    Accept,
    /// `Some(Err(..))` for object 0, `Some(Ok(()))` for the others.
    RejectFirst,
    /// Panics.
    Panic,
}

/// Numbers that log every call made on them, in order.
#[derive(Clone, Default)]
struct Logged {
    log: Arc<Mutex<Vec<String>>>,
    now: Arc<AtomicU8>,
    next: Arc<AtomicU64>,
}

impl Logged {
    fn new(now: Now) -> Self {
        let logged = Logged::default();
        logged.set(now);
        logged
    }

    fn set(&self, now: Now) {
        self.now.store(now as u8, Ordering::SeqCst);
    }

    fn push(&self, entry: String) {
        self.log.lock().unwrap().push(entry);
    }

    /// The calls so far, emptied.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl Manager for Logged {
    type Type = u64;
    type Error = Never;

    async fn create(&self) -> Result<u64, Never> {
        Ok(self.next.fetch_add(1, Ordering::SeqCst))
    }

    fn recycle_now(&self, id: &mut u64, _: &Meta) -> Option<RecycleResult<Never>> {
        self.push(format!("now {id}"));
        match self.now.load(Ordering::SeqCst) {
            n if n == Now::Defer as u8 => None,
            n if n == Now::Accept as u8 => Some(Ok(())),
            n if n == Now::RejectFirst as u8 && *id == 0 => {
                Some(Err(RecycleError::message("worn out")))
            }
            n if n == Now::RejectFirst as u8 => Some(Ok(())),
            _ => panic!("recycle_now panics"),
        }
    }

    async fn recycle(&self, id: &mut u64, _: &Meta) -> RecycleResult<Never> {
        self.push(format!("recycle {id}"));
        Ok(())
    }

    fn detach(&self, id: &mut u64) {
        self.push(format!("detach {id}"));
    }
}

fn pool(manager: &Logged, max_size: usize) -> Pool<Logged> {
    Pool::builder(manager.clone())
        .max_size(max_size)
        .build()
        .expect("valid")
}

/// Creates `n` objects and returns them all, so that they are idle (lowest slot first).
async fn fill(pool: &Pool<Logged>, n: usize) {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(pool.get().await.expect("room"));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_decision_in_recycle_now_is_the_recycle() {
    let manager = Logged::new(Now::Accept);
    let pool = pool(&manager, 2);
    fill(&pool, 1).await;
    manager.take();
    let object = pool.get().await.unwrap();
    assert_eq!(*object, 0);
    assert_eq!(manager.take(), ["now 0"], "`recycle` is not called");
    let meta = Object::meta(&object);
    assert_eq!(meta.recycle_count(), 1, "counted as a recycle");
    assert_eq!(pool.stats().recycled, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn none_leaves_the_object_to_recycle() {
    let manager = Logged::new(Now::Defer);
    let pool = pool(&manager, 2);
    fill(&pool, 1).await;
    manager.take();
    let object = pool.get().await.unwrap();
    assert_eq!(*object, 0);
    assert_eq!(manager.take(), ["now 0", "recycle 0"]);
    assert_eq!(pool.stats().recycled, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_rejection_drops_the_object_and_the_get_goes_on() {
    let manager = Logged::new(Now::RejectFirst);
    let pool = pool(&manager, 2);
    fill(&pool, 2).await;
    manager.take();
    let object = pool.get().await.unwrap();
    assert_eq!(*object, 1, "the next idle object");
    assert_eq!(manager.take(), ["now 0", "detach 0", "now 1"]);
    let stats = pool.stats();
    assert_eq!((stats.discarded, stats.recycled), (1, 1));
    assert_eq!(stats.status.size, 1, "object 0's room was given back");
}

#[tokio::test(flavor = "current_thread")]
async fn a_panic_fails_the_get_and_gives_the_room_back() {
    let manager = Logged::new(Now::Panic);
    let pool = pool(&manager, 1);
    fill(&pool, 1).await;
    manager.take();
    let error = pool.get().await.unwrap_err();
    assert!(
        matches!(
            error,
            PoolError::Panicked {
                step: Step::Recycle,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(manager.take(), ["now 0", "detach 0"]);
    let stats = pool.stats();
    assert_eq!((stats.panics, stats.status.size), (1, 0));
    // The room is back: the next `get` creates.
    manager.set(Now::Accept);
    assert_eq!(*pool.get().await.unwrap(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn it_runs_between_the_recycle_hooks() {
    for (now, expected) in [
        (Now::Accept, &["pre 0", "now 0", "post 0"][..]),
        (Now::Defer, &["pre 0", "now 0", "recycle 0", "post 0"][..]),
    ] {
        let manager = Logged::new(now);
        let (pre, post) = (manager.clone(), manager.clone());
        let pool = Pool::builder(manager.clone())
            .max_size(1)
            .pre_recycle(Hook::sync_fn(move |id: &mut u64, _: &Meta| {
                pre.push(format!("pre {id}"));
                Ok(())
            }))
            .post_recycle(Hook::sync_fn(move |id: &mut u64, _: &Meta| {
                post.push(format!("post {id}"));
                Ok(())
            }))
            .build()
            .unwrap();
        fill(&pool, 1).await;
        manager.take();
        assert_eq!(*pool.get().await.unwrap(), 0);
        assert_eq!(manager.take(), expected, "{now:?}");
    }
}

/// A pool with only one of the two recycle hooks runs it too (the fast path is for pools
/// with neither).
#[tokio::test(flavor = "current_thread")]
async fn one_recycle_hook_alone_still_runs() {
    for pre in [true, false] {
        let manager = Logged::new(Now::Accept);
        let hook = manager.clone();
        let name = if pre { "pre" } else { "post" };
        let run = Hook::sync_fn(move |id: &mut u64, _: &Meta| {
            hook.push(format!("{name} {id}"));
            Ok(())
        });
        let builder = Pool::builder(manager.clone()).max_size(1);
        let pool = if pre {
            builder.pre_recycle(run)
        } else {
            builder.post_recycle(run)
        }
        .build()
        .unwrap();
        fill(&pool, 1).await;
        manager.take();
        assert_eq!(*pool.get().await.unwrap(), 0);
        let expected = if pre {
            ["pre 0", "now 0"]
        } else {
            ["now 0", "post 0"]
        };
        assert_eq!(manager.take(), expected);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn it_runs_for_an_object_handed_to_a_waiter() {
    let manager = Logged::new(Now::Accept);
    let pool = pool(&manager, 1);
    let held = pool.get().await.unwrap();
    manager.take();
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { *pool.get().await.unwrap() })
    };
    tokio::task::yield_now().await;
    assert_eq!(pool.stats().status.waiting, 1, "the get waits");
    drop(held);
    assert_eq!(waiter.await.unwrap(), 0);
    assert_eq!(manager.take(), ["now 0"], "`recycle` is not called");
}
