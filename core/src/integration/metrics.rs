//! Exporting pool statistics through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`).
//!
//! Every pool keeps its own counters and answers `stats()` with a snapshot; this module turns
//! such a snapshot into gauges (what is true now: streams per phase, requests in flight,
//! waiters) and counters (what happened so far: acquires, spin-ups, failures, reaps), labelled
//! `pool = <name>`, on whatever recorder the application installed (Prometheus, StatsD, …).
//! Nothing here touches a pool's hot path: export reads a snapshot, on the application's
//! schedule.
//!
//! * [`Export::export`] records one snapshot now;
//! * [`spawn_exporter`] records a pool's snapshot every `interval` on a tokio task, and stops
//!   by itself once the pool is gone.
//!
//! # Names
//!
//! | pool | gauges | counters (`_total`) |
//! |---|---|---|
//! | [`StreamPool`](crate::stream::StreamPool) | `slotpool_stream_slots{phase}`, `slotpool_stream_in_flight`, `slotpool_stream_waiting`, `slotpool_stream_breaker_state` (0 closed, 1 open, 2 half-open) | `acquires`, `waits`, `wait_nanoseconds`, `completed`, `failed`, `cancelled`, `spin_ups`, `connect_failures`, `stream_failures`, `panics`, `open_timeouts`, `stalls`, `reaps`, `late_responses`, `unknown_responses`, `breaker_rejections`, each as `slotpool_stream_<name>_total` |
//! | [`ChannelPool`](crate::channel::ChannelPool) | `slotpool_channel_channels`, `slotpool_channel_clients` | `slotpool_channel_{gets,opened,reaps,broken,panics}_total` |
//! | [`ClientPool`](crate::client::ClientPool) | `slotpool_client_{clients,idle,in_use,waiting}` and `slotpool_client_capacity` (bounded pools) | `slotpool_client_{acquires,waits,wait_nanoseconds,created,make_failures,discards,reaps,held_too_long,hold_nanoseconds}_total` |
//! | [`managed::Pool`](crate::managed::Pool) | `slotpool_managed_{max_size,size,available,in_use,waiting}` | `slotpool_managed_{gets,gets_direct,gets_waited,gets_timed_out,checkouts,waits,wait_nanoseconds,created,created_off_caller,create_failures,recycled,discarded,broken,expired,reaped,surplus,retained_out,detached,panics,paused,held_too_long,hold_nanoseconds}_total` |
//! | [`SessionPool`](crate::session::SessionPool) | `slotpool_session_{capacity,in_use,active,establishing,idle}` | `slotpool_session_{connects,bootstraps,reattaches,failures,exhausted,waits,wait_nanoseconds,released,reaped,rebuilt,panics}_total` |
//!
//! (The keyed admission pool exports per caller key as it goes; see
//! [`keyed`](crate::keyed#statistics-and-metrics).)
//!
//! # Wait histograms
//!
//! The pools whose callers wait also record each wait as it ends (served, timed out or given
//! up), without an exporter: a sample in seconds of the histogram `slotpool_<pool>_wait_seconds`
//! (`managed`, `client`, `stream`, `session`, `keyed`), labelled `pool = name`, `name` being
//! what the pool's builder was told with its `name` setting, or `"default"` without one (the
//! keyed pool's histograms also carry `key` and `share`). A caller that finds room at once
//! records nothing and reads no clock. The histogram's count and sum are the snapshot's
//! `waits` and `wait_time`, as they stood at each wait's end; name the pool as its exporter
//! so that both carry the same label:
//!
//! ```
//! # use std::convert::Infallible;
//! # use std::time::Duration;
//! # use slotpool::managed::{Manager, Pool};
//! # struct Conns;
//! # impl Manager for Conns {
//! #     type Type = u32;
//! #     type Error = Infallible;
//! #     async fn create(&self) -> Result<u32, Infallible> { Ok(1) }
//! # }
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let pool = std::sync::Arc::new(Pool::builder(Conns).name("orders").build().unwrap());
//! let weak = std::sync::Arc::downgrade(&pool);
//! // `slotpool_managed_wait_seconds{pool="orders"}` as callers wait, and every ten seconds
//! // `slotpool_managed_waits_total{pool="orders"}`, `..._wait_nanoseconds_total`, ...
//! let exporter = slotpool::metrics::spawn_exporter("orders", Duration::from_secs(10), move || {
//!     weak.upgrade().map(|pool| pool.stats())
//! });
//! # drop(pool);
//! # exporter.await.unwrap();
//! # }
//! ```
//!
//! # Example
//!
//! ```
//! # use std::time::Duration;
//! # use slotpool::channel::{ChannelConnector, ChannelPool};
//! # struct Lazy;
//! # impl ChannelConnector for Lazy {
//! #     type Channel = u64;
//! #     fn connect_lazy(&self, id: u64) -> u64 { id }
//! # }
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // `ChannelPool::build` returns an `Arc`; other pools are wrapped by the caller.
//! let channels = ChannelPool::builder(Lazy).build().expect("valid configuration");
//! let weak = std::sync::Arc::downgrade(&channels);
//! // Every ten seconds, while the pool lives; the task ends by itself after it is dropped.
//! let exporter = slotpool::metrics::spawn_exporter("channels", Duration::from_secs(10), move || {
//!     weak.upgrade().map(|pool| pool.stats())
//! });
//! # drop(channels);
//! # exporter.await.expect("the exporter ends once the pool is gone");
//! # }
//! ```

use std::borrow::Cow;
use std::time::Duration;

use crate::channel::ChannelStats;
use crate::client::ClientStats;
use crate::managed;
use crate::panic::{catch, report};
use crate::protocol::breaker::BreakerState;
use crate::session::SessionStats;
use crate::stream::StreamStats;

/// A statistics snapshot that can be recorded through the `metrics` facade.
pub trait Export {
    /// Records this snapshot now: gauges set to its values, counters raised to its totals,
    /// each labelled `pool = name`.
    fn export(&self, pool: &str);
}

/// Records `stats()` of a pool every `interval` on a new tokio task, as [`Export::export`] with
/// label `pool = name`. The task ends when `stats` returns `None` (typically a `Weak` to the
/// pool that no longer upgrades), so it never keeps a dropped pool alive.
///
/// `stats` and the installed recorder are user code: a panic in either is caught, logged as a
/// `tracing` error event with its message, and that tick's export is skipped; the exporter
/// carries on at the next tick (it neither dies silently nor panics on the runtime).
///
/// # Panics
/// Outside a tokio runtime, or if `interval` is zero.
pub fn spawn_exporter<S, F>(
    name: impl Into<Cow<'static, str>>,
    interval: Duration,
    stats: F,
) -> tokio::task::JoinHandle<()>
where
    S: Export + 'static,
    F: FnMut() -> Option<S> + Send + 'static,
{
    assert!(!interval.is_zero(), "the export interval must not be zero");
    tokio::spawn(export_every(name.into(), interval, stats))
}

async fn export_every<S, F>(name: Cow<'static, str>, interval: Duration, mut stats: F)
where
    S: Export,
    F: FnMut() -> Option<S>,
{
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match catch(|| stats().map(|snapshot| snapshot.export(&name))) {
            Ok(Some(())) => {}
            Ok(None) => return,
            Err(panic) => report("metrics exporter (stats callback or recorder)", &panic),
        }
    }
}

/// Sets gauge `name{pool}`.
fn gauge(name: &'static str, pool: &str, value: f64) {
    metrics::gauge!(name, "pool" => pool.to_owned()).set(value);
}

/// Raises counter `name{pool}` to the pool's running total.
fn counter(name: &'static str, pool: &str, total: u64) {
    metrics::counter!(name, "pool" => pool.to_owned()).absolute(total);
}

/// A total wait time as a counter's value: nanoseconds, saturating (at about 584 years).
fn nanoseconds(total: Duration) -> u64 {
    u64::try_from(total.as_nanos()).unwrap_or(u64::MAX)
}

/// The numeric form of a breaker state for a gauge: 0 closed, 1 open, 2 half-open.
pub fn breaker_state_value(state: BreakerState) -> f64 {
    match state {
        BreakerState::Closed => 0.0,
        BreakerState::Open => 1.0,
        BreakerState::HalfOpen => 2.0,
    }
}

impl Export for StreamStats {
    fn export(&self, pool: &str) {
        let t = &self.table;
        for (phase, n) in [
            ("empty", t.empty),
            ("starting", t.starting),
            ("ready", t.ready),
            ("draining", t.draining),
        ] {
            metrics::gauge!("slotpool_stream_slots", "pool" => pool.to_owned(), "phase" => phase)
                .set(n as f64);
        }
        gauge("slotpool_stream_in_flight", pool, t.in_flight as f64);
        gauge("slotpool_stream_waiting", pool, t.waiting as f64);
        gauge(
            "slotpool_stream_breaker_state",
            pool,
            breaker_state_value(self.breaker),
        );
        counter("slotpool_stream_acquires_total", pool, self.acquires);
        counter("slotpool_stream_waits_total", pool, self.waits);
        counter(
            "slotpool_stream_wait_nanoseconds_total",
            pool,
            nanoseconds(self.wait_time),
        );
        counter("slotpool_stream_completed_total", pool, self.completed);
        counter("slotpool_stream_failed_total", pool, self.failed);
        counter("slotpool_stream_cancelled_total", pool, self.cancelled);
        counter("slotpool_stream_spin_ups_total", pool, self.spin_ups);
        counter("slotpool_stream_panics_total", pool, self.panics);
        counter(
            "slotpool_stream_open_timeouts_total",
            pool,
            self.open_timeouts,
        );
        counter("slotpool_stream_stalls_total", pool, self.stalls);
        counter(
            "slotpool_stream_connect_failures_total",
            pool,
            self.connect_failures,
        );
        counter(
            "slotpool_stream_stream_failures_total",
            pool,
            self.stream_failures,
        );
        counter("slotpool_stream_reaps_total", pool, self.reaps);
        counter(
            "slotpool_stream_late_responses_total",
            pool,
            self.late_responses,
        );
        counter(
            "slotpool_stream_unknown_responses_total",
            pool,
            self.unknown_responses,
        );
        counter(
            "slotpool_stream_breaker_rejections_total",
            pool,
            self.breaker_rejections,
        );
    }
}

impl Export for ChannelStats {
    fn export(&self, pool: &str) {
        gauge("slotpool_channel_channels", pool, self.channels as f64);
        gauge("slotpool_channel_clients", pool, self.clients as f64);
        counter("slotpool_channel_gets_total", pool, self.gets);
        counter("slotpool_channel_opened_total", pool, self.opened);
        counter("slotpool_channel_reaps_total", pool, self.reaps);
        counter("slotpool_channel_broken_total", pool, self.broken);
        counter("slotpool_channel_panics_total", pool, self.panics);
    }
}

impl Export for ClientStats {
    fn export(&self, pool: &str) {
        if let Some(capacity) = self.capacity {
            gauge("slotpool_client_capacity", pool, capacity as f64);
        }
        gauge("slotpool_client_clients", pool, self.clients as f64);
        gauge("slotpool_client_idle", pool, self.idle as f64);
        gauge("slotpool_client_in_use", pool, self.in_use as f64);
        gauge("slotpool_client_waiting", pool, self.waiting as f64);
        counter("slotpool_client_acquires_total", pool, self.acquires);
        counter("slotpool_client_waits_total", pool, self.waits);
        counter(
            "slotpool_client_wait_nanoseconds_total",
            pool,
            nanoseconds(self.wait_time),
        );
        counter("slotpool_client_created_total", pool, self.created);
        counter(
            "slotpool_client_make_failures_total",
            pool,
            self.make_failures,
        );
        counter("slotpool_client_discards_total", pool, self.discards);
        counter("slotpool_client_reaps_total", pool, self.reaps);
        counter(
            "slotpool_client_held_too_long_total",
            pool,
            self.held_too_long,
        );
        counter(
            "slotpool_client_hold_nanoseconds_total",
            pool,
            nanoseconds(self.hold_time),
        );
    }
}

impl Export for SessionStats {
    fn export(&self, pool: &str) {
        gauge("slotpool_session_capacity", pool, self.capacity as f64);
        gauge("slotpool_session_in_use", pool, self.in_use as f64);
        gauge("slotpool_session_active", pool, self.active as f64);
        gauge(
            "slotpool_session_establishing",
            pool,
            self.establishing as f64,
        );
        gauge("slotpool_session_idle", pool, self.idle as f64);
        counter("slotpool_session_connects_total", pool, self.connects);
        counter("slotpool_session_bootstraps_total", pool, self.bootstraps);
        counter("slotpool_session_reattaches_total", pool, self.reattaches);
        counter("slotpool_session_failures_total", pool, self.failures);
        counter("slotpool_session_exhausted_total", pool, self.exhausted);
        counter("slotpool_session_waits_total", pool, self.waits);
        counter(
            "slotpool_session_wait_nanoseconds_total",
            pool,
            nanoseconds(self.wait_time),
        );
        counter("slotpool_session_released_total", pool, self.released);
        counter("slotpool_session_reaped_total", pool, self.reaped);
        counter("slotpool_session_rebuilt_total", pool, self.rebuilt);
        counter("slotpool_session_panics_total", pool, self.panics);
    }
}

impl Export for managed::Stats {
    fn export(&self, pool: &str) {
        let status = &self.status;
        for (name, value) in [
            ("slotpool_managed_max_size", status.max_size),
            ("slotpool_managed_size", status.size),
            ("slotpool_managed_available", status.available),
            ("slotpool_managed_in_use", status.in_use),
            ("slotpool_managed_waiting", status.waiting),
        ] {
            gauge(name, pool, value as f64);
        }
        for (name, total) in [
            ("slotpool_managed_gets_total", self.gets),
            ("slotpool_managed_gets_direct_total", self.gets_direct),
            ("slotpool_managed_gets_waited_total", self.gets_waited),
            ("slotpool_managed_gets_timed_out_total", self.gets_timed_out),
            ("slotpool_managed_checkouts_total", self.checkouts),
            ("slotpool_managed_waits_total", self.waits),
            (
                "slotpool_managed_wait_nanoseconds_total",
                nanoseconds(self.wait_time),
            ),
            ("slotpool_managed_created_total", self.created),
            (
                "slotpool_managed_created_off_caller_total",
                self.created_off_caller,
            ),
            (
                "slotpool_managed_create_failures_total",
                self.create_failures,
            ),
            ("slotpool_managed_recycled_total", self.recycled),
            ("slotpool_managed_discarded_total", self.discarded),
            ("slotpool_managed_broken_total", self.broken),
            ("slotpool_managed_expired_total", self.expired),
            ("slotpool_managed_reaped_total", self.reaped),
            ("slotpool_managed_surplus_total", self.surplus),
            ("slotpool_managed_retained_out_total", self.retained_out),
            ("slotpool_managed_detached_total", self.detached),
            ("slotpool_managed_panics_total", self.panics),
            ("slotpool_managed_paused_total", self.paused),
            ("slotpool_managed_held_too_long_total", self.held_too_long),
            (
                "slotpool_managed_hold_nanoseconds_total",
                nanoseconds(self.hold_time),
            ),
        ] {
            counter(name, pool, total);
        }
    }
}
