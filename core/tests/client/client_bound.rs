//! `max_clients` bounds the clients that exist: a client the pool drops (reaped, discarded,
//! surplus) counts until its destructor is done. The test holds a client's drop open (its
//! destructor blocks its thread until the test lets it go) and asks for a client meanwhile.
//! Real threads, mock clock; nothing is timed.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use crate::common::channel::{Fixture, IDLE};
use slotpool::client::ClientError;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// While the drop is held: a try is refused and one client is alive; then the room is back.
fn check_held_drop(f: &Fixture, rt: &tokio::runtime::Runtime, dropper: thread::JoinHandle<()>) {
    f.knobs.drop_hold.wait_entered(1);
    let refused = rt.block_on(f.clients.try_acquire());
    assert!(
        matches!(refused, Err(ClientError::NoCapacity)),
        "a new client beside one still being dropped: {:?}",
        refused.map(|c| c.slot())
    );
    assert_eq!(f.knobs.live.load(Ordering::SeqCst), 1);
    f.knobs.drop_hold.open();
    dropper.join().unwrap();
    let client = rt.block_on(f.clients.try_acquire());
    assert!(client.is_ok(), "room after the drop: {:?}", client.err());
}

#[test]
fn a_reaped_client_counts_until_dropped() {
    let rt = runtime();
    let f = rt.block_on(async { Fixture::new(4, Some(1)) });
    drop(rt.block_on(f.clients.acquire()).unwrap());
    f.knobs.hold_drop.store(true, Ordering::SeqCst);
    f.time.advance(IDLE + Duration::from_secs(1));
    let now = f.time.now();
    let reaper = {
        let clients = std::sync::Arc::clone(&f.clients);
        thread::spawn(move || assert_eq!(clients.reap(now), 1))
    };
    check_held_drop(&f, &rt, reaper);
}

#[test]
fn a_discarded_client_counts_until_dropped() {
    let rt = runtime();
    let f = rt.block_on(async { Fixture::new(4, Some(1)) });
    let client = rt.block_on(f.clients.acquire()).unwrap();
    f.knobs.hold_drop.store(true, Ordering::SeqCst);
    let discarder = thread::spawn(move || client.discard());
    check_held_drop(&f, &rt, discarder);
}
