//! Every exported metric read back through `metrics-util`'s debugging recorder and held against
//! the names table in `slotpool::metrics`'s docs and the statistics field each name documents.
//!
//! Each snapshot is built with a different, non-zero value in every field, so a name exported
//! from the wrong field, a field exported twice or a field nobody exports is seen. A counter
//! `slotpool_<pool>_<field>_total` and a gauge `slotpool_<pool>_<field>` carry the snapshot's
//! field `<field>` (or the one field ending in `.<field>`, for the managed pool's `status` and
//! the stream pool's `table`); `wait_nanoseconds` carries `wait_time` in nanoseconds (and
//! `hold_nanoseconds`, `hold_time`); the
//! stream pool's `slots{phase}` carries `table.<phase>` and `breaker_state` the breaker's state
//! coded as the table says. The table itself is read from the module's source, so a row that
//! drifts from the code fails here.
#![cfg(feature = "metrics")]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use slotpool::channel::ChannelStats;
use slotpool::client::ClientStats;
use slotpool::managed::{Stats, Status};
use slotpool::metrics::Export;
use slotpool::session::SessionStats;
use slotpool::stream::StreamStats;
use slotpool::stream::{BreakerState, TableStats};

/// The module whose docs carry the names table.
const METRICS_SOURCE: &str = include_str!("../../src/integration/metrics.rs");

/// The pool label every snapshot here is exported with.
const POOL: &str = "checked";

/// Fields no metric carries, each with the reason it is left out.
const NOT_EXPORTED: &[(&str, &str)] = &[(
    "StreamStats.table.slots",
    "slots allocated so far: the sum of `slots{phase}` over the four phases",
)];

/// What a snapshot exported: `name` or `name{phase}` to its value.
#[derive(Debug, Default)]
struct Exported {
    gauges: BTreeMap<String, f64>,
    counters: BTreeMap<String, u64>,
}

fn export(stats: &impl Export) -> Exported {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || stats.export(POOL));
    let mut exported = Exported::default();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut name = key.name().to_owned();
        for label in key.labels() {
            match label.key() {
                "pool" => assert_eq!(label.value(), POOL, "{name}: the pool label"),
                "phase" => name = format!("{name}{{{}}}", label.value()),
                other => panic!("{name}: a label the docs do not name: {other}"),
            }
        }
        let fresh = match value {
            DebugValue::Gauge(v) => exported.gauges.insert(name.clone(), v.into_inner()),
            DebugValue::Counter(v) => exported.counters.insert(name.clone(), v).map(|v| v as f64),
            DebugValue::Histogram(_) => panic!("{name}: export records no histogram"),
        };
        assert!(fresh.is_none(), "{name} exported twice");
    }
    exported
}

/// The names the docs' table gives a pool: (gauges, counters), gauges with a label as
/// `name{label}`.
fn documented(pool: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let row = METRICS_SOURCE
        .lines()
        .filter_map(|line| line.strip_prefix("//! | "))
        .find(|row| row.starts_with(&format!("[`{pool}`]")))
        .unwrap_or_else(|| panic!("no row for {pool} in the names table"));
    let columns: Vec<&str> = row.split(" | ").collect();
    assert_eq!(columns.len(), 3, "{pool}'s row: pool | gauges | counters");
    (names(columns[1]), names(columns[2]))
}

/// The names in one cell: each `code` span, braces of alternatives expanded, and bare field
/// names put into the cell's `<name>` template.
fn names(cell: &str) -> BTreeSet<String> {
    let spans: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
    let template = spans.iter().find(|span| span.contains("<name>"));
    let mut out = BTreeSet::new();
    for span in &spans {
        if span.contains("<name>") {
            continue;
        }
        let name = match template {
            Some(template) if !span.starts_with("slotpool_") => template.replace("<name>", span),
            _ => span.to_string(),
        };
        out.extend(expand(&name));
    }
    out
}

/// `a_{x,y}_b` as `a_x_b` and `a_y_b`; a brace without a comma is a label and stays.
fn expand(name: &str) -> Vec<String> {
    match (name.find('{'), name.find('}')) {
        (Some(open), Some(close)) if name[open..close].contains(',') => name[open + 1..close]
            .split(',')
            .flat_map(|alt| expand(&format!("{}{alt}{}", &name[..open], &name[close + 1..])))
            .collect(),
        _ => vec![name.to_owned()],
    }
}

/// A snapshot's fields as `Type.field` (nested: `Type.outer.inner`) to the value its `Debug`
/// prints.
fn fields(snapshot: &impl std::fmt::Debug) -> BTreeMap<String, String> {
    let text = format!("{snapshot:?}")
        .replace('{', " { ")
        .replace('}', " } ")
        .replace(',', " , ");
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let mut out = BTreeMap::new();
    let mut path = vec![tokens[0].to_owned()];
    let mut key: Option<&str> = None;
    let mut at = 1;
    while at < tokens.len() {
        let token = tokens[at];
        match token {
            "{" | "," => {}
            "}" => {
                path.pop();
            }
            _ if token.ends_with(':') => key = Some(token.trim_end_matches(':')),
            _ => {
                let key = key.take().expect("a value after its field's name");
                if tokens.get(at + 1) == Some(&"{") {
                    path.push(key.to_owned());
                } else {
                    out.insert(format!("{}.{key}", path.join(".")), token.to_owned());
                }
            }
        }
        at += 1;
    }
    out
}

/// The numeric value of a field as `Debug` printed it (`Some(n)`, `n`, or `nns` for a
/// duration under a microsecond).
fn number(printed: &str) -> Option<u64> {
    let inner = printed
        .strip_prefix("Some(")
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(printed);
    inner
        .parse()
        .ok()
        .or_else(|| inner.strip_suffix("ns").and_then(|n| n.parse().ok()))
}

/// The breaker's coding as the gauge's docs give it, e.g. `(0 closed, 1 open, 2 half-open)`.
fn breaker_codes() -> BTreeMap<String, f64> {
    let after = METRICS_SOURCE
        .split("`slotpool_stream_breaker_state` (")
        .nth(1)
        .expect("the breaker gauge's coding in the table");
    after[..after.find(')').unwrap()]
        .split(", ")
        .map(|pair| {
            let (code, state) = pair.split_once(' ').unwrap();
            (state.replace('-', ""), code.parse().unwrap())
        })
        .collect()
}

/// Checks a snapshot's export against the docs' row for `pool` and against its fields.
fn check(pool: &str, prefix: &str, snapshot: &(impl Export + std::fmt::Debug)) {
    let fields = fields(snapshot);
    let numbers: BTreeMap<&String, u64> = fields
        .iter()
        .filter_map(|(field, printed)| number(printed).map(|n| (field, n)))
        .collect();
    let distinct: BTreeSet<u64> = numbers.values().copied().collect();
    assert!(
        distinct.len() == numbers.len() && !distinct.contains(&0),
        "the test's {pool} snapshot needs a different non-zero value in every field: {fields:?}"
    );

    let exported = export(snapshot);
    let (gauges, counters) = documented(pool);
    let exported_gauges: BTreeSet<String> = exported.gauges.keys().cloned().collect();
    let exported_counters: BTreeSet<String> = exported.counters.keys().cloned().collect();
    let gauges: BTreeSet<String> = gauges
        .iter()
        .flat_map(|name| match name.strip_suffix("{phase}") {
            Some(base) => ["empty", "starting", "ready", "draining"]
                .iter()
                .map(|phase| format!("{base}{{{phase}}}"))
                .collect(),
            None => vec![name.clone()],
        })
        .collect();
    assert_eq!(
        exported_gauges, gauges,
        "{pool}: gauges exported vs documented"
    );
    assert_eq!(
        exported_counters, counters,
        "{pool}: counters exported vs documented"
    );

    let mut carried = BTreeSet::new();
    let mut field_of = |metric: &str, short: &str| -> u64 {
        let short = match short {
            "wait_nanoseconds" => "wait_time",
            "hold_nanoseconds" => "hold_time",
            short => short,
        };
        let wanted: Vec<&String> = numbers
            .keys()
            .copied()
            .filter(|f| f.ends_with(&format!(".{short}")))
            .collect();
        assert_eq!(
            wanted.len(),
            1,
            "{metric}: one field named {short} in {fields:?}"
        );
        carried.insert(wanted[0].clone());
        numbers[wanted[0]]
    };
    for (name, value) in &exported.counters {
        let short = name
            .strip_prefix(prefix)
            .and_then(|n| n.strip_suffix("_total"))
            .unwrap_or_else(|| panic!("{name}: not {prefix}<field>_total"));
        assert_eq!(*value, field_of(name, short), "{name} carries its field");
    }
    let mut breaker_carried = false;
    for (name, value) in &exported.gauges {
        let short = name.strip_prefix(prefix).unwrap();
        if short == "breaker_state" {
            let state = fields.get("StreamStats.breaker").unwrap();
            breaker_carried = true;
            assert_eq!(*value, breaker_codes()[&state.to_lowercase()], "{name}");
            continue;
        }
        let short = match short.split_once('{') {
            Some(("slots", phase)) => phase.trim_end_matches('}'),
            _ => short,
        };
        assert_eq!(
            *value,
            field_of(name, short) as f64,
            "{name} carries its field"
        );
    }

    if breaker_carried {
        carried.insert("StreamStats.breaker".to_owned());
    }
    let left: Vec<&String> = fields
        .keys()
        .filter(|f| !carried.contains(*f))
        .filter(|f| !NOT_EXPORTED.iter().any(|(left, _)| left == f))
        .collect();
    assert!(
        left.is_empty(),
        "{pool}: fields no metric carries: {left:?}"
    );
}

/// Hands out 1, 2, 3, ...: a different value for every field of a snapshot.
#[derive(Default)]
struct Numbers(u64);

impl Numbers {
    fn u(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
    fn us(&mut self) -> usize {
        self.u() as usize
    }
    fn nanos(&mut self) -> Duration {
        Duration::from_nanos(self.u())
    }
}

fn stream_stats(breaker: BreakerState) -> StreamStats {
    // Non-exhaustive: a field added later stays 0 here, which `check` refuses until it is set.
    let mut n = Numbers::default();
    let mut table = TableStats::default();
    table.slots = n.us();
    table.empty = n.us();
    table.starting = n.us();
    table.ready = n.us();
    table.draining = n.us();
    table.in_flight = n.u();
    table.waiting = n.us();
    let mut stats = StreamStats::default();
    stats.table = table;
    stats.acquires = n.u();
    stats.waits = n.u();
    stats.wait_time = n.nanos();
    stats.completed = n.u();
    stats.failed = n.u();
    stats.cancelled = n.u();
    stats.spin_ups = n.u();
    stats.connect_failures = n.u();
    stats.stream_failures = n.u();
    stats.panics = n.u();
    stats.open_timeouts = n.u();
    stats.stalls = n.u();
    stats.reaps = n.u();
    stats.late_responses = n.u();
    stats.unknown_responses = n.u();
    stats.breaker_rejections = n.u();
    stats.breaker = breaker;
    stats
}

#[test]
fn stream_metrics_are_the_documented_names_of_their_fields() {
    for breaker in [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
    ] {
        check("StreamPool", "slotpool_stream_", &stream_stats(breaker));
    }
}

#[test]
fn channel_metrics_are_the_documented_names_of_their_fields() {
    let mut n = Numbers::default();
    let mut stats = ChannelStats::default();
    stats.channels = n.us();
    stats.clients = n.u();
    stats.gets = n.u();
    stats.opened = n.u();
    stats.reaps = n.u();
    stats.broken = n.u();
    stats.panics = n.u();
    check("ChannelPool", "slotpool_channel_", &stats);
}

fn client_stats(bounded: bool) -> ClientStats {
    let mut n = Numbers::default();
    // Non-exhaustive: a field added later stays 0 here, which `check` refuses until it is set.
    let mut stats = ClientStats::default();
    stats.capacity = bounded.then(|| n.us());
    stats.clients = n.us();
    stats.idle = n.us();
    stats.in_use = n.us();
    stats.waiting = n.us();
    stats.acquires = n.u();
    stats.waits = n.u();
    stats.wait_time = n.nanos();
    stats.created = n.u();
    stats.make_failures = n.u();
    stats.discards = n.u();
    stats.reaps = n.u();
    stats.held_too_long = n.u();
    stats.hold_time = n.nanos();
    stats
}

#[test]
fn client_metrics_are_the_documented_names_of_their_fields() {
    check("ClientPool", "slotpool_client_", &client_stats(true));
}

#[test]
fn an_unbounded_client_pool_exports_no_capacity() {
    let exported = export(&client_stats(false));
    let (gauges, _) = documented("ClientPool");
    assert!(gauges.contains("slotpool_client_capacity"));
    let unbounded: BTreeSet<String> = gauges
        .into_iter()
        .filter(|g| g != "slotpool_client_capacity")
        .collect();
    assert_eq!(
        exported.gauges.keys().cloned().collect::<BTreeSet<_>>(),
        unbounded
    );
}

#[test]
fn managed_metrics_are_the_documented_names_of_their_fields() {
    // `Stats` and `Status` are non-exhaustive: a field added later stays 0 here, which `check`
    // refuses until this test sets it.
    let mut n = Numbers::default();
    let mut status = Status::default();
    status.max_size = n.us();
    status.size = n.us();
    status.available = n.us();
    status.in_use = n.us();
    status.waiting = n.us();
    let mut stats = Stats::default();
    stats.status = status;
    stats.gets = n.u();
    stats.gets_direct = n.u();
    stats.gets_waited = n.u();
    stats.gets_timed_out = n.u();
    stats.checkouts = n.u();
    stats.waits = n.u();
    stats.wait_time = n.nanos();
    stats.created = n.u();
    stats.created_off_caller = n.u();
    stats.create_failures = n.u();
    stats.recycled = n.u();
    stats.discarded = n.u();
    stats.broken = n.u();
    stats.expired = n.u();
    stats.reaped = n.u();
    stats.surplus = n.u();
    stats.retained_out = n.u();
    stats.detached = n.u();
    stats.panics = n.u();
    stats.paused = n.u();
    stats.held_too_long = n.u();
    stats.hold_time = n.nanos();
    check("managed::Pool", "slotpool_managed_", &stats);
}

#[test]
fn session_metrics_are_the_documented_names_of_their_fields() {
    // `SessionStats` is non-exhaustive: a field added later stays 0 here, which `check`
    // refuses until this test sets it.
    let mut n = Numbers::default();
    let mut stats = SessionStats::default();
    stats.capacity = n.us();
    stats.in_use = n.us();
    stats.active = n.us();
    stats.establishing = n.us();
    stats.idle = n.us();
    stats.connects = n.u();
    stats.bootstraps = n.u();
    stats.reattaches = n.u();
    stats.failures = n.u();
    stats.exhausted = n.u();
    stats.waits = n.u();
    stats.wait_time = n.nanos();
    stats.released = n.u();
    stats.reaped = n.u();
    stats.rebuilt = n.u();
    stats.panics = n.u();
    check("SessionPool", "slotpool_session_", &stats);
}

#[test]
fn the_table_parser_reads_what_the_docs_write() {
    assert_eq!(
        expand("slotpool_x_{a,b}_total"),
        ["slotpool_x_a_total", "slotpool_x_b_total"]
    );
    assert_eq!(
        expand("slotpool_x_slots{phase}"),
        ["slotpool_x_slots{phase}"]
    );
    let (gauges, counters) = documented("StreamPool");
    assert!(gauges.contains("slotpool_stream_slots{phase}"));
    assert!(counters.contains("slotpool_stream_acquires_total"));
    assert_eq!(breaker_codes().len(), 3);
    let fields = fields(&stream_stats(BreakerState::HalfOpen));
    assert_eq!(fields["StreamStats.table.empty"], "2");
    assert_eq!(fields["StreamStats.breaker"], "HalfOpen");
}
