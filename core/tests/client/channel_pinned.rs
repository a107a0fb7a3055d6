//! `ChannelPool`: documented behaviours that no other test pinned (see `docs/pinned.md`): the
//! builder's defaults, the reaper's interval, the idle time's rounding, the bound on clients
//! per channel, the connector panic's single log line, and the reaper's end when the last
//! handle goes while guards live. Time is `slotpool::Clock::mock()`; the background reaper
//! ticks on a paused tokio clock the test moves by hand.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::channel::{steered_channel_pool, Lazy, IDLE};
use crate::common::logs::capture_logs;
use crate::common::{build_error, run_spawned, MockTime};
use slotpool::__internal::shared::MAX_HOLDERS;
use slotpool::channel::ChannelPool;
use slotpool::ConfigError;

const MS: Duration = Duration::from_millis(1);

/// Moves tokio's paused clock by `by` and lets the reaper task run its tick.
async fn tick(by: Duration) {
    run_spawned().await;
    tokio::time::advance(by).await;
    run_spawned().await;
}

/// Module docs, *Idle time*: the release stamp is rounded up and the reap time down, so a
/// channel released between two milliseconds is never reaped before the full timeout.
#[test]
fn a_release_between_milliseconds_is_never_reaped_early() {
    let (time, pool, live) = crate::common::channel::channel_pool(1);
    time.advance(Duration::from_micros(400));
    drop(pool.get().unwrap()); // released at 0.4 ms
    time.advance(IDLE - Duration::from_micros(100)); // 0.1 ms short of the timeout
    assert_eq!(
        pool.reap(time.now()),
        0,
        "idle 0.1 ms less than the timeout"
    );
    time.advance(Duration::from_micros(700)); // 0.6 ms past the timeout
    assert_eq!(
        pool.reap(time.now()),
        1,
        "reaped once the timeout has passed"
    );
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

/// Builder: "Clients one channel carries at most. Default: 16."
#[test]
fn the_default_is_16_clients_per_channel() {
    let pool = ChannelPool::builder(Lazy::default())
        .reap_interval(None)
        .build()
        .unwrap();
    let guards: Vec<_> = (0..17).map(|_| pool.get().unwrap()).collect();
    assert!(guards[..16].iter().all(|g| g.id() == 0), "16 on channel 0");
    assert_eq!(guards[16].id(), 1, "the 17th opens channel 1");
}

/// Builder: more than `MAX_HOLDERS` clients per channel is a `ConfigError`; exactly
/// `MAX_HOLDERS` is not.
#[test]
fn max_holders_clients_per_channel_is_the_largest_accepted() {
    let most = MAX_HOLDERS as usize;
    let pool = ChannelPool::builder(Lazy::default())
        .max_clients_per_channel(most)
        .reap_interval(None)
        .build();
    assert!(pool.is_ok(), "MAX_HOLDERS refused: {:?}", pool.err());
    let error = build_error(
        ChannelPool::builder(Lazy::default())
            .max_clients_per_channel(most + 1)
            .reap_interval(None)
            .build(),
    );
    assert_eq!(
        error,
        ConfigError::TooLarge {
            name: "max_clients_per_channel",
            value: most as u64 + 1,
            max: MAX_HOLDERS.into(),
        }
    );
}

/// Builder: "How long a channel may have no clients before the reaper closes it. Default:
/// 180 s."
#[test]
fn the_default_idle_timeout_is_180_seconds() {
    let time = MockTime::new();
    let pool = ChannelPool::builder(Lazy::default())
        .reap_interval(None)
        .clock(time.clock())
        .build()
        .unwrap();
    drop(pool.get().unwrap());
    time.advance(Duration::from_secs(180) - MS);
    assert_eq!(pool.reap(time.now()), 0);
    time.advance(MS);
    assert_eq!(pool.reap(time.now()), 1);
}

/// Builder: "How often the background reaper runs `ChannelPool::reap`. Default: every 10 s";
/// it reads the injected clock.
#[tokio::test(start_paused = true)]
async fn the_default_reaper_runs_every_10_seconds() {
    let time = MockTime::new();
    let pool = ChannelPool::builder(Lazy::default())
        .idle_timeout(Duration::from_secs(1))
        .clock(time.clock())
        .build()
        .unwrap();
    drop(pool.get().unwrap());
    time.advance(Duration::from_secs(2));
    tick(Duration::from_secs(10) - MS).await;
    assert_eq!(pool.stats().channels, 1, "no tick before 10 s");
    tick(MS).await;
    let mut expected = slotpool::channel::ChannelStats::default();
    expected.reaps = 1;
    expected.gets = 1;
    expected.opened = 1;
    assert_eq!(pool.stats(), expected);
}

/// Builder: an explicit `reap_interval` is the reaper's period.
#[tokio::test(start_paused = true)]
async fn an_explicit_reap_interval_is_the_reapers_period() {
    let time = MockTime::new();
    let pool = ChannelPool::builder(Lazy::default())
        .idle_timeout(Duration::from_secs(1))
        .reap_interval(Some(Duration::from_secs(3)))
        .clock(time.clock())
        .build()
        .unwrap();
    drop(pool.get().unwrap());
    time.advance(Duration::from_secs(2));
    tick(Duration::from_secs(3) - MS).await;
    assert_eq!(pool.stats().channels, 1, "no tick before 3 s");
    tick(MS).await;
    assert_eq!(pool.stats().channels, 0, "reaped at the 3 s tick");
}

/// *Lifetimes*: guards hold the shared state, not the handle, and "dropping the last handle
/// stops the reaper even while guards live": an idle channel kept alive by a live guard's
/// shared state is not reaped after the handle is gone.
#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_stops_the_reaper_while_guards_live() {
    let time = MockTime::new();
    let (connector, live) = Lazy::counted();
    let pool = ChannelPool::builder(connector)
        .max_clients_per_channel(1)
        .idle_timeout(Duration::from_secs(1))
        .reap_interval(Some(Duration::from_secs(1)))
        .clock(time.clock())
        .build()
        .unwrap();
    let held = pool.get().unwrap();
    drop(pool.get().unwrap()); // channel 1, idle
    run_spawned().await;
    drop(pool);
    time.advance(Duration::from_secs(5));
    tick(Duration::from_secs(5)).await;
    assert_eq!(
        live.load(Ordering::SeqCst),
        2,
        "the idle channel was reaped after the last handle was dropped"
    );
    assert_eq!(held.channel().id, 0, "the guard still has its channel");
    drop(held);
    assert_eq!(
        live.load(Ordering::SeqCst),
        0,
        "the last guard frees everything"
    );
}

/// *Failure model*: a connector panic is "caught where the pool calls it and logged once".
#[test]
fn a_connector_panic_is_logged_once() {
    let (_time, pool, _live, panics) = steered_channel_pool(2);
    let (logs, _guard) = capture_logs();
    panics.next.store(1, Ordering::SeqCst);
    assert!(pool.get().is_err());
    let text = logs.text();
    assert_eq!(text.matches("connect_lazy panics").count(), 1, "{text}");
    assert!(text.contains("ERROR"), "{text}");
}

/// A channel whose last clone panics when dropped (the connector's code) while its
/// connector's fuse is lit: the first channels opened panic, later ones drop quietly.
struct Bomb(bool);

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 {
            crate::common::panics::inject("a channel's destructor");
        }
    }
}

/// Opens `Bomb`s: the first `fuse` of them panic when dropped.
struct Bombs {
    fuse: std::sync::atomic::AtomicUsize,
}

impl Bombs {
    fn new(fuse: usize) -> Self {
        Bombs { fuse: fuse.into() }
    }
}

impl slotpool::channel::ChannelConnector for Bombs {
    type Channel = std::sync::Arc<Bomb>;
    fn connect_lazy(&self, _id: u64) -> std::sync::Arc<Bomb> {
        let lit = self
            .fuse
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        std::sync::Arc::new(Bomb(lit))
    }
}

/// `reap` (a comment in `channel.rs`, not the module docs): "a channel's destructor is the
/// connector's code, so a panic in it is contained (the reaper carries on)".
#[test]
fn a_panicking_channel_destructor_is_contained_by_the_reaper() {
    let time = MockTime::new();
    let pool = ChannelPool::builder(Bombs::new(1))
        .idle_timeout(IDLE)
        .reap_interval(None)
        .clock(time.clock())
        .build()
        .unwrap();
    drop(pool.get().unwrap());
    time.advance(IDLE);
    assert_eq!(pool.reap(time.now()), 1, "closed, the panic contained");
    assert_eq!(pool.stats().channels, 0);
    assert_eq!(pool.get().unwrap().id(), 0, "the pool carries on");
}

/// The same with two channels reaped in one pass: each destructor's panic is contained. (The
/// reaped channels were dropped as one `Vec` inside one guard, so the second destructor
/// panicked while the first unwound and the process aborted, "panic in a destructor during
/// cleanup"; they are dropped one at a time now.)
#[test]
fn two_panicking_channel_destructors_in_one_pass_are_contained() {
    let time = MockTime::new();
    let pool = ChannelPool::builder(Bombs::new(2))
        .max_clients_per_channel(1)
        .idle_timeout(IDLE)
        .reap_interval(None)
        .clock(time.clock())
        .build()
        .unwrap();
    let (a, b) = (pool.get().unwrap(), pool.get().unwrap());
    drop((a, b));
    time.advance(IDLE);
    assert_eq!(
        pool.reap(time.now()),
        2,
        "both closed, the panics contained"
    );
    assert_eq!(pool.get().unwrap().id(), 0, "the pool carries on");
}
