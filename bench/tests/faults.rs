//! The fault scenarios of `slotpool-bench --faults` on slotpool's pool, each a short run of
//! the bench's own code (`slotpool_bench::faults::run`): under the fault, no caller is left
//! past its deadline; after it, the pool serves again; once the load stops, the pool's count
//! equals the connections its manager holds open and every unit of capacity is back.
//!
//! The blackhole, the terminated backends and the slow queries leave the server up: they run
//! against the server of `SLOTPOOL_PG` (its own `application_name` per run, so other tests'
//! connections are not touched). The restart and the outage stop the server: that test starts
//! a server of its own (`bench/postgres/start.sh` with a state directory of its own) and
//! stops it at the end, never the one in `SLOTPOOL_PG`.
//!
//! ```sh
//! bench/postgres/start.sh && . target/postgres/env
//! cargo test -p slotpool-bench --test faults
//! ```
//!
//! Without `SLOTPOOL_PG` every PostgreSQL test prints that it is skipped and passes, unless
//! `SLOTPOOL_PG_REQUIRED=1`.
//!
//! The tonic scenarios (`faults/tonic-*`: slotpool's stream pool over tonic to the bench's
//! in-process server, through the proxy) need nothing outside the process and always run,
//! with shorter windows than the bench's ([`peer_timing`]): the peer killed or blackholed for
//! 1.2 s (past the callers' 1 s deadline), 5% of requests slowed for 0.5 s.
//!
//! The runs take turns (each loads the machine with 16 callers, and a neighbour's load would
//! make callers late for reasons not the pool's).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use slotpool_bench::faults::{self, tonic, Cluster, FaultRecord, Impl, Scenario, Timing};

/// One run at a time.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `SLOTPOOL_PG`, or `None` (after saying why) when no server was given and none is required.
fn settings(test: &str) -> Option<String> {
    let Ok(settings) = std::env::var("SLOTPOOL_PG") else {
        assert!(
            std::env::var_os("SLOTPOOL_PG_REQUIRED").is_none(),
            "SLOTPOOL_PG_REQUIRED is set but SLOTPOOL_PG is not: start a server with \
             bench/postgres/start.sh and source target/postgres/env"
        );
        eprintln!(
            "skipped {test}: SLOTPOOL_PG is not set (bench/postgres/start.sh starts a server and \
             writes it to target/postgres/env)"
        );
        return None;
    };
    Some(settings)
}

/// Runs `scenario` on slotpool's pool and checks what every scenario must end with.
fn check(cluster: &Arc<Cluster>, scenario: Scenario) -> FaultRecord {
    let record = faults::run(cluster, scenario, Impl::Slotpool, &Timing::quick())
        .unwrap_or_else(|error| panic!("{}: {error}", scenario.case()));
    eprintln!("{record:?}");
    assert_eq!(
        record.leaked, 0,
        "{}: the pool leaked: {record:?}",
        record.case
    );
    assert_eq!(
        record.late, 0,
        "{}: callers past their deadline: {record:?}",
        record.case
    );
    assert!(
        record.recovery_ns.is_some(),
        "{}: no success after the fault: {record:?}",
        record.case
    );
    assert_eq!(
        record.pool_size_end as i64, record.live_end,
        "{}: the pool's size is not what its manager holds open",
        record.case
    );
    assert_eq!(
        record.backends_end, record.live_end,
        "{}: the server's backends are not what the manager holds open",
        record.case
    );
    record
}

#[test]
fn blackhole_recovers_and_accounts() {
    let Some(settings) = settings("blackhole_recovers_and_accounts") else {
        return;
    };
    let _turn = turn();
    let record = check(&Arc::new(Cluster::given(&settings)), Scenario::Blackhole);
    // Every connection was held for the whole fault: queries timed out, nothing was closed,
    // so nothing needed a new connection.
    assert!(
        record.failed > 0,
        "the blackhole failed no query: {record:?}"
    );
    assert_eq!(record.connects, 0, "{record:?}");
}

#[test]
fn terminated_backends_are_replaced_and_accounted() {
    let Some(settings) = settings("terminated_backends_are_replaced_and_accounted") else {
        return;
    };
    let _turn = turn();
    let record = check(&Arc::new(Cluster::given(&settings)), Scenario::Terminate);
    assert!(
        record.connects_after_fault > 0,
        "no reconnection: {record:?}"
    );
}

#[test]
fn slow_queries_fail_nothing() {
    let Some(settings) = settings("slow_queries_fail_nothing") else {
        return;
    };
    let _turn = turn();
    let record = check(&Arc::new(Cluster::given(&settings)), Scenario::Slow);
    assert_eq!(record.failed, 0, "{record:?}");
}

#[test]
fn restart_and_outage_recover_and_account() {
    if settings("restart_and_outage_recover_and_account").is_none() {
        return;
    }
    let _turn = turn();
    let state = std::env::temp_dir().join(format!("slotpool-faults-test-{}", std::process::id()));
    let cluster = Arc::new(Cluster::start(&state).expect("a server of the test's own"));
    for scenario in [Scenario::Restart, Scenario::Outage] {
        let record = check(&cluster, scenario);
        assert!(
            record.failed > 0,
            "the server went away unnoticed: {record:?}"
        );
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&state);
}

/// The tonic tests' timing: shorter stretches than the bench's, the fault still longer than
/// the callers' deadline.
fn peer_timing() -> Timing {
    Timing {
        pre: Duration::from_millis(600),
        post: Duration::from_millis(800),
        slow_for: Duration::from_millis(500),
        peer_down: Duration::from_millis(1200),
    }
}

/// Runs the tonic `scenario` on slotpool's stack and checks what every scenario must end
/// with: no leak, no late caller, a success after the fault, and the streams the pool counts
/// open are those the server has open.
fn check_peer(scenario: tonic::Scenario) -> FaultRecord {
    let _turn = turn();
    let record = tonic::run(scenario, tonic::Impl::Slotpool, &peer_timing())
        .unwrap_or_else(|error| panic!("{}: {error}", scenario.case()));
    eprintln!("{record:?}");
    assert_eq!(
        record.leaked, 0,
        "{}: the pool leaked: {record:?}",
        record.case
    );
    assert_eq!(
        record.late, 0,
        "{}: callers past their deadline: {record:?}",
        record.case
    );
    assert!(
        record.recovery_ns.is_some(),
        "{}: no success after the fault: {record:?}",
        record.case
    );
    assert_eq!(
        record.pool_size_end as i64, record.live_end,
        "{}: the streams the pool counts open are not those the server has open",
        record.case
    );
    record
}

#[test]
fn killed_peer_is_reconnected_and_accounted() {
    let record = check_peer(tonic::Scenario::Kill);
    assert!(
        record.failed > 0,
        "the peer went away unnoticed: {record:?}"
    );
    assert!(
        record.connects > 0,
        "no reconnection attempt during the kill: {record:?}"
    );
}

#[test]
fn blackholed_peer_recovers_and_accounts() {
    let record = check_peer(tonic::Scenario::Blackhole);
    // Every request in flight waited out its caller's deadline; nothing was closed, so
    // nothing needed a new connection.
    assert!(
        record.failed > 0,
        "the blackhole failed no request: {record:?}"
    );
    assert_eq!(record.connects, 0, "{record:?}");
}

#[test]
fn slow_peer_fails_nothing() {
    let record = check_peer(tonic::Scenario::Slow);
    assert_eq!(record.failed, 0, "{record:?}");
}
