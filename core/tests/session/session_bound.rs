//! `pool_size` bounds the connections that exist: a retired session's capacity comes back only
//! after its connection is closed (the module docs' *Exact accounting*: "returns the capacity
//! last, so a new session never overlaps a connection still open"). The test holds a close
//! open (the connector's `close` blocks its thread until the test lets it go) and asks for
//! another session meanwhile. Real threads, mock clock; nothing is timed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

use crate::common::session::{ctx, pool};
use slotpool::session::SessionError;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_released_session_holds_its_capacity_until_its_connection_is_closed() {
    let rt = runtime();
    let (pool, counts, _time) = rt.block_on(async { pool(1) });
    let pool = Arc::new(pool);
    let first = rt.block_on(pool.acquire("a", &ctx())).unwrap();
    drop(first);
    counts.hold_close.store(true, Ordering::SeqCst);
    // The release retires "a" and blocks in its connection's close.
    let releaser = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || assert!(pool.release("a")))
    };
    counts.close_hold.wait_entered(1);
    let refused = rt.block_on(pool.acquire("b", &ctx()));
    assert!(
        matches!(refused, Err(SessionError::Exhausted { capacity: 1 })),
        "a second connection beside one still closing: {refused:?}"
    );
    assert_eq!(counts.opened() - counts.closed(), 1, "one connection open");
    counts.close_hold.open();
    releaser.join().unwrap();
    let second = rt.block_on(pool.acquire("b", &ctx()));
    assert!(second.is_ok(), "capacity back after the close: {second:?}");
    assert_eq!(counts.opened(), 2);
}
