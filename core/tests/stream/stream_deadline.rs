//! Deadlines that fire on time: a stream's `open_timeout` and `stall_timeout` are kept by its
//! driver on tokio's timer, so each fails its callers within a few milliseconds of its setting
//! whatever the reap interval (an hour, the default, or no background reaper at all), and a
//! stream retired by either lets go of what it held at once.
//!
//! Every test runs on tokio's paused clock, which moves only when every task waits, straight to
//! the next timer, so "when" below is exact and nothing depends on the machine's speed. The
//! pool's own clock is a mock that is never advanced: the reaper's pass, which checks both
//! deadlines on that clock as a backstop, can fire neither here, so whatever fires is the
//! driver's timer.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use crate::common::stream::{outcome, Req, Script, TestConnector};
use crate::common::{poll_once, settle_until, MockTime};
use slotpool::stream::{RequestError, StreamPoolBuilder};
use slotpool::Reach;
use tokio::time::{sleep, Instant};

const MS: Duration = Duration::from_millis(1);

/// How late past its setting a deadline may fire: tokio's timer rounds a deadline up to its
/// next millisecond tick.
const SLACK: Duration = Duration::from_millis(5);

/// The reap intervals every deadline is checked under.
#[derive(Debug, Clone, Copy)]
enum Reaping {
    /// A background reaper every hour.
    Hourly,
    /// The default interval (one second).
    Default,
    /// No background reaper.
    Off,
}

const REAPINGS: [Reaping; 3] = [Reaping::Hourly, Reaping::Default, Reaping::Off];

/// `builder` on the never-advanced mock clock `time`, reaped as `reaping` says.
fn reaped(
    builder: StreamPoolBuilder<TestConnector>,
    time: &MockTime,
    reaping: Reaping,
) -> StreamPoolBuilder<TestConnector> {
    let builder = builder.clock(time.clock());
    match reaping {
        Reaping::Hourly => builder.reap_interval(Some(Duration::from_secs(3600))),
        Reaping::Default => builder,
        Reaping::Off => builder.reap_interval(None),
    }
}

/// Awaits `future` and says how much (paused) time it took. A future still pending after a
/// minute fails the test (a deadline that never fires would otherwise hang it: the paused clock
/// keeps jumping to the reaper's next tick).
async fn timed<F: Future>(future: F) -> (F::Output, Duration) {
    let start = Instant::now();
    match tokio::time::timeout(Duration::from_secs(60), future).await {
        Ok(output) => (output, start.elapsed()),
        Err(_) => panic!("still pending after a minute: the deadline never fired"),
    }
}

/// `elapsed` is `setting` or at most [`SLACK`] more.
fn assert_on_time(what: &str, reaping: Reaping, elapsed: Duration, setting: Duration) {
    assert!(
        elapsed >= setting && elapsed <= setting + SLACK,
        "{what} ({reaping:?} reaping): fired after {elapsed:?}, set to {setting:?}"
    );
}

/// A connect that never finishes fails its caller `open_timeout` after the stream started,
/// not at the next reaper pass: with a 200 ms timeout, at 200 ms whether the reaper runs every
/// hour, every second or never.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_open_timeout_fires_within_a_few_milliseconds_whatever_the_reap_interval() {
    for reaping in REAPINGS {
        let time = MockTime::new();
        let (script, _) = Script::echo();
        let (script, _hold) = script.held();
        let timeout = 200 * MS;
        let pool = reaped(script.sized(1, 4), &time, reaping)
            .open_timeout(Some(timeout))
            .build()
            .unwrap();
        let guard = pool.acquire().await.unwrap();
        let (result, elapsed) = timed(guard.send(Req::new(1))).await;
        match result {
            Err(RequestError::OpenTimeout { timeout: reported }) => assert_eq!(reported, timeout),
            other => panic!("expected an open timeout ({reaping:?}), got {other:?}"),
        }
        assert_on_time("the open timeout", reaping, elapsed, timeout);
        let stats = pool.stats();
        assert_eq!(
            (stats.open_timeouts, stats.connect_failures, stats.failed),
            (1, 1, 1),
            "{reaping:?}: {stats:?}"
        );
    }
}

/// The open deadline is the stream's, counted from its start: a caller that joins the opening
/// stream 150 ms later fails with the first one, 50 ms after it joined.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_caller_that_joins_an_opening_stream_fails_at_the_streams_deadline() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let (script, _hold) = script.held();
    let timeout = 200 * MS;
    let pool = reaped(script.sized(1, 4), &time, Reaping::Off)
        .open_timeout(Some(timeout))
        .build()
        .unwrap();
    let start = Instant::now();
    let first = pool.acquire().await.unwrap();
    let mut first = pin!(first.send(Req::new(1)));
    assert!(poll_once(first.as_mut()).is_pending());
    sleep(150 * MS).await;
    let joiner = pool.acquire().await.unwrap();
    assert_eq!(
        pool.stats().spin_ups,
        1,
        "the second caller joined the opening stream"
    );
    let (joined, waited) = timed(joiner.send(Req::new(2))).await;
    assert!(
        matches!(joined, Err(RequestError::OpenTimeout { .. })),
        "{joined:?}"
    );
    assert_on_time(
        "the joiner's failure",
        Reaping::Off,
        waited + 150 * MS,
        timeout,
    );
    assert!(matches!(
        outcome("the first caller fails with it", first).await,
        Err(RequestError::OpenTimeout { .. })
    ));
    assert_on_time(
        "the first caller's failure",
        Reaping::Off,
        start.elapsed(),
        timeout,
    );
    assert_eq!(pool.stats().open_timeouts, 1);
}

/// A stream with requests outstanding that receives nothing is declared hung
/// `stall_timeout` after the last thing it received: with 500 ms, a request answered at
/// 300 ms leaves the other one to fail at 800 ms, whatever the reap interval.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_stall_fires_within_a_few_milliseconds_of_the_last_activity_whatever_the_reap_interval() {
    for reaping in REAPINGS {
        let time = MockTime::new();
        let (script, mut streams) = Script::manual();
        let timeout = 500 * MS;
        let pool = reaped(script.sized(1, 2), &time, reaping)
            .stall_timeout(Some(timeout))
            .build()
            .unwrap();
        let (a, b) = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
        let mut a = pin!(a.send(Req::new(1)));
        let mut b = pin!(b.send(Req::new(2)));
        assert!(poll_once(a.as_mut()).is_pending() && poll_once(b.as_mut()).is_pending());
        let mut server = streams.recv().await.unwrap();
        let first = server.next_request().await.unwrap();
        let _second = server.next_request().await.unwrap();
        sleep(300 * MS).await;
        server.respond(first.id.unwrap(), 1);
        assert_eq!(a.await.unwrap().body, 1);
        let (result, silence) = timed(b).await;
        match result {
            Err(error @ RequestError::Stalled { .. }) => {
                assert_eq!(error.reach(), Reach::MaybeApplied);
                assert!(matches!(error, RequestError::Stalled { timeout: t, .. } if t == timeout));
            }
            other => panic!("expected a stall ({reaping:?}), got {other:?}"),
        }
        assert_on_time("the stall", reaping, silence, timeout);
        let stats = pool.stats();
        assert_eq!(
            (
                stats.stalls,
                stats.stream_failures,
                stats.completed,
                stats.failed
            ),
            (1, 1, 1, 1),
            "{reaping:?}: {stats:?}"
        );
    }
}

/// What moves the stall deadline, on one stream with a 500 ms stall timeout and no reaper:
/// a response restarts the count (a stream busy for 800 ms that answered at 400 ms is not
/// hung); a stream with nothing outstanding never stalls, however long it is quiet (the timer
/// left from its busy spell fires and is ignored); the count of a new busy spell starts when it
/// starts, not at the last response (a request answered after 400 ms, 10 s after the last
/// one, is fine); and a request sent while another is outstanding does not restart it (a peer
/// that takes requests and never answers is hung 500 ms after it went busy).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn responses_move_the_stall_deadline_and_quiet_idle_streams_never_stall() {
    let time = MockTime::new();
    let (script, mut streams) = Script::manual();
    let timeout = 500 * MS;
    let pool = reaped(script.sized(1, 2), &time, Reaping::Off)
        .stall_timeout(Some(timeout))
        .idle_timeout(Duration::from_secs(3600))
        .build()
        .unwrap();
    let (a, b) = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
    let mut a = pin!(a.send(Req::new(1)));
    let mut b = pin!(b.send(Req::new(2)));
    assert!(poll_once(a.as_mut()).is_pending() && poll_once(b.as_mut()).is_pending());
    let mut server = streams.recv().await.unwrap();
    let (first, second) = (
        server.next_request().await.unwrap(),
        server.next_request().await.unwrap(),
    );
    sleep(400 * MS).await;
    server.respond(first.id.unwrap(), 1);
    assert_eq!(a.await.unwrap().body, 1);
    sleep(400 * MS).await;
    assert!(
        poll_once(b.as_mut()).is_pending(),
        "busy for 800 ms, but 400 ms since the last response"
    );
    server.respond(second.id.unwrap(), 2);
    assert_eq!(b.await.unwrap().body, 2);
    // Idle, for 20 stall timeouts.
    sleep(Duration::from_secs(10)).await;
    assert_eq!(pool.stats().stalls, 0, "an idle stream never stalls");
    // A new busy spell, answered after 400 ms.
    let c = pool.acquire().await.unwrap();
    let mut c = pin!(c.send(Req::new(3)));
    assert!(poll_once(c.as_mut()).is_pending());
    let third = server.next_request().await.unwrap();
    sleep(400 * MS).await;
    server.respond(third.id.unwrap(), 3);
    assert_eq!(c.await.unwrap().body, 3);
    assert_eq!(pool.stats().stalls, 0);
    // A peer that takes requests and never answers: sending more does not keep it alive.
    let d = pool.acquire().await.unwrap();
    let start = Instant::now();
    let mut d = pin!(d.send(Req::new(4)));
    assert!(poll_once(d.as_mut()).is_pending());
    server.next_request().await.unwrap();
    sleep(300 * MS).await;
    let e = pool.acquire().await.unwrap();
    let mut e = pin!(e.send(Req::new(5)));
    assert!(poll_once(e.as_mut()).is_pending());
    server.next_request().await.unwrap();
    let (result, _) = timed(d).await;
    assert!(
        matches!(result, Err(RequestError::Stalled { .. })),
        "{result:?}"
    );
    assert_on_time("the stall", Reaping::Off, start.elapsed(), timeout);
    assert!(matches!(
        outcome("the later request fails with the stream", e).await,
        Err(RequestError::Stalled {
            reach: Reach::MaybeApplied,
            ..
        })
    ));
    assert_eq!(pool.stats().stalls, 1);
}

/// A stream retired by a timeout lets go of what it held when its deadline fires, not when
/// idle reaping comes round (here never: the reaper runs hourly and the idle timeout is an
/// hour): a stream that never opened drops its connect future, and a stalled one drops both
/// of its halves, so the peer sees its request stream end and its response channel close; the
/// slot is free at once. What is dropped can tell the stream was retired as hung
/// (`Retirement::hung`, what the tonic integration discards the stream's client on); a stream
/// that ended any other way is not.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_stream_retired_by_a_timeout_lets_go_of_its_resources_at_once() {
    let time = MockTime::new();
    let hour = Duration::from_secs(3600);
    // The open timeout: the connect future goes.
    let (script, _) = Script::echo();
    let (script, _hold) = script.held();
    let pool = reaped(script.sized(1, 4), &time, Reaping::Hourly)
        .idle_timeout(hour)
        .open_timeout(Some(200 * MS))
        .build()
        .unwrap();
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    settle_until("the connect starts", || script.live_connects() == 1).await;
    let (result, elapsed) = timed(send).await;
    assert!(
        matches!(result, Err(RequestError::OpenTimeout { .. })),
        "{result:?}"
    );
    assert_on_time("the open timeout", Reaping::Hourly, elapsed, 200 * MS);
    settle_until("the timed-out connect is dropped", || {
        script.live_connects() == 0
    })
    .await;
    assert_eq!(
        script.hung_drops(),
        1,
        "the connect future saw it was retired as hung"
    );
    settle_until("the slot is free", || pool.stats().table.empty == 1).await;
    // The stall timeout: both halves go.
    let (script, mut streams) = Script::manual();
    let pool = reaped(script.sized(1, 4), &time, Reaping::Hourly)
        .idle_timeout(hour)
        .stall_timeout(Some(500 * MS))
        .build()
        .unwrap();
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    let mut server = streams.recv().await.unwrap();
    server.next_request().await.unwrap();
    let (result, elapsed) = timed(send).await;
    assert!(
        matches!(result, Err(RequestError::Stalled { .. })),
        "{result:?}"
    );
    assert_on_time("the stall", Reaping::Hourly, elapsed, 500 * MS);
    settle_until("the inbound half is dropped", || {
        server.responses.is_closed()
    })
    .await;
    assert!(
        server.next_request().await.is_none(),
        "the outbound half ends"
    );
    settle_until("the slot is free", || pool.stats().table.empty == 1).await;
    assert_eq!(pool.stats().reaps, 0, "nothing waited for the reaper");
    assert_eq!(
        script.hung_drops(),
        1,
        "the inbound half saw it was retired as hung"
    );
    // A stream the peer ends is not retired as hung.
    let (server, _) = crate::common::stream::answer_on_new_stream(&pool, &mut streams, 2).await;
    server.fail("the peer goes away");
    drop(server);
    settle_until("the ended stream's slot is free", || {
        pool.stats().table.empty == 1
    })
    .await;
    assert_eq!(pool.stats().stream_failures, 2);
    assert_eq!(script.hung_drops(), 1, "an ended stream is not hung");
}

/// In a runtime built without tokio's time driver the drivers can arm no timer: the pool still
/// builds, and the reaper's pass on the pool's clock (here by hand, on the mock) fires both
/// deadlines, the backstop the docs describe.
#[test]
fn without_the_time_driver_the_reapers_pass_fires_both_deadlines() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let time = MockTime::new();
    let second = Duration::from_secs(1);
    runtime.block_on(async {
        let (script, _) = Script::echo();
        let (script, _hold) = script.held();
        let pool = reaped(script.sized(1, 4), &time, Reaping::Off)
            .open_timeout(Some(5 * second))
            .build()
            .expect("builds without the time driver");
        let guard = pool.acquire().await.unwrap();
        let mut send = pin!(guard.send(Req::new(1)));
        assert!(poll_once(send.as_mut()).is_pending());
        crate::common::run_spawned().await;
        time.advance(5 * second);
        pool.reap(time.now());
        assert!(matches!(
            outcome("the pass fires the open timeout", send).await,
            Err(RequestError::OpenTimeout { .. })
        ));

        let (script, mut streams) = Script::manual();
        let pool = reaped(script.sized(1, 4), &time, Reaping::Off)
            .stall_timeout(Some(5 * second))
            .build()
            .expect("builds without the time driver");
        let guard = pool.acquire().await.unwrap();
        let mut send = pin!(guard.send(Req::new(1)));
        assert!(poll_once(send.as_mut()).is_pending());
        let mut server = streams.recv().await.unwrap();
        server.next_request().await.unwrap();
        crate::common::run_spawned().await;
        pool.reap(time.now());
        time.advance(5 * second);
        pool.reap(time.now());
        assert!(matches!(
            outcome("the pass fires the stall", send).await,
            Err(RequestError::Stalled { .. })
        ));
        assert_eq!(pool.stats().stalls, 1);
    });
}

/// Found while building the stream model's driver (`fuzz/src/stream_model.rs`, issue #41): the
/// builder finds out whether the runtime has tokio's time driver by making a `Sleep` inside
/// `catch_unwind`, so building a pool in a runtime without it (a configuration the docs
/// support: "where the runtime has no time driver only the reaper's pass checks" the
/// deadlines) panics once on the way. The panic goes through the process's panic hook (the
/// default hook prints tokio's "timers are disabled" to stderr; libFuzzer's aborts, which is why
/// the fuzz driver runs on a paused clock instead), and under `panic = "abort"` the build
/// aborts the process. Tokio has no public query for its time driver, so there is no small fix;
/// this holds the build to "no panic on the way".
#[test]
#[ignore = "known bug: StreamPoolBuilder::build probes for tokio's time driver with a caught \
            panic, which the panic hook sees (and `panic = \"abort\"` turns into an abort)"]
fn building_without_the_time_driver_panics_nowhere() {
    use std::cell::Cell;
    thread_local! {
        static PANICS: Cell<usize> = const { Cell::new(0) };
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.with(|panics| panics.set(panics.get() + 1));
        previous(info);
    }));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let time = MockTime::new();
    runtime.block_on(async {
        let (script, _) = Script::echo();
        let pool = reaped(script.sized(1, 4), &time, Reaping::Off)
            .build()
            .expect("builds without the time driver");
        drop(pool);
    });
    assert_eq!(
        PANICS.with(Cell::get),
        0,
        "building a pool in a runtime without the time driver panicked on the way"
    );
}
