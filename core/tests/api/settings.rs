//! The settings every pool shares (idle timeout, reaping, clock, breaker) follow one set of
//! rules in every pool, and each error names the setter the user called.

use std::time::Duration;

use crate::common::build_error;
use crate::common::channel::{Factory, Lazy};
use crate::common::stream::Script;
use slotpool::channel::ChannelPool;
use slotpool::client::ClientPool;
use slotpool::session::SessionPool;
use slotpool::ConfigError;

const ZERO: Duration = Duration::ZERO;
const SECOND: Duration = Duration::from_secs(1);

/// A zero idle timeout is refused everywhere, under the name the pool's setter has.
#[tokio::test]
async fn a_zero_idle_timeout_is_refused_by_every_pool() {
    let (script, _) = Script::echo();
    assert_eq!(
        build_error(script.builder().idle_timeout(ZERO).build()),
        ConfigError::Zero("idle_timeout")
    );
    assert_eq!(
        build_error(
            ChannelPool::builder(Lazy::default())
                .idle_timeout(ZERO)
                .build()
        ),
        ConfigError::Zero("idle_timeout")
    );
    let channels = ChannelPool::builder(Lazy::default()).build().unwrap();
    let factory = Factory::default();
    assert_eq!(
        build_error(
            ClientPool::builder(channels, factory)
                .idle_timeout(ZERO)
                .build()
        ),
        ConfigError::Zero("idle_timeout")
    );
    let (connector, _) = crate::common::session::fake();
    assert_eq!(
        build_error(SessionPool::builder(connector).max_idle_time(ZERO).build()),
        ConfigError::Zero("max_idle_time")
    );
}

/// A zero reap interval is refused everywhere, under the name the pool's setter has.
#[tokio::test]
async fn a_zero_reap_interval_is_refused_by_every_pool() {
    let (script, _) = Script::echo();
    assert_eq!(
        build_error(script.builder().reap_interval(Some(ZERO)).build()),
        ConfigError::Zero("reap_interval")
    );
    assert_eq!(
        build_error(
            ChannelPool::builder(Lazy::default())
                .reap_interval(Some(ZERO))
                .build()
        ),
        ConfigError::Zero("reap_interval")
    );
    let channels = ChannelPool::builder(Lazy::default()).build().unwrap();
    let factory = Factory::default();
    assert_eq!(
        build_error(
            ClientPool::builder(channels, factory)
                .reap_interval(Some(ZERO))
                .build()
        ),
        ConfigError::Zero("reap_interval")
    );
    let (connector, _) = crate::common::session::fake();
    assert_eq!(
        build_error(
            SessionPool::builder(connector)
                .reap_every(Some(ZERO))
                .build()
        ),
        ConfigError::Zero("reap_every")
    );
}

/// Outside a tokio runtime the default reaper is off and the pool builds; an interval asked
/// for there is a typed error, never a panic when the reaper would be spawned.
#[test]
fn outside_a_runtime_only_an_explicit_reaper_is_an_error() {
    let channels = ChannelPool::builder(Lazy::default())
        .build()
        .expect("default reaper is off");
    assert_eq!(
        build_error(
            ChannelPool::builder(Lazy::default())
                .reap_interval(Some(SECOND))
                .build()
        ),
        ConfigError::Missing("tokio runtime")
    );
    let factory = Factory::default();
    ClientPool::builder(channels.clone(), factory)
        .build()
        .expect("default reaper is off");
    let factory = Factory::default();
    assert_eq!(
        build_error(
            ClientPool::builder(channels, factory)
                .reap_interval(Some(SECOND))
                .build()
        ),
        ConfigError::Missing("tokio runtime")
    );
    let (connector, _) = crate::common::session::fake();
    SessionPool::builder(connector)
        .build()
        .expect("default reaper is off");
    let (connector, _) = crate::common::session::fake();
    assert_eq!(
        build_error(
            SessionPool::builder(connector)
                .reap_every(Some(SECOND))
                .build()
        ),
        ConfigError::Missing("tokio runtime")
    );
}

/// A breaker that would open after zero failures is refused.
#[tokio::test]
async fn a_breaker_threshold_of_zero_is_refused() {
    let (script, _) = Script::echo();
    assert_eq!(
        build_error(script.builder().breaker(0, SECOND).build()),
        ConfigError::Zero("breaker")
    );
}
