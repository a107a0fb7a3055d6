//! The managed pool's background task: one reaper pass every reap interval, and topping
//! `min_idle` up at start and whenever objects were dropped. It holds only a `Weak` to the
//! pool's state between rounds, so it ends once the pool is gone; the last pool handle also
//! aborts it.

use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::AbortHandle;
use tokio::time::MissedTickBehavior;

use super::{Manager, Shared};
use crate::panic::catch;
use crate::sync::{Arc, Weak};

/// Spawns the task on `runtime` (reaping every `reap_interval`, if any).
pub(super) fn spawn<M: Manager>(
    runtime: &Handle,
    shared: &Arc<Shared<M>>,
    reap_interval: Option<Duration>,
) -> AbortHandle {
    let weak = Arc::downgrade(shared);
    let notify = Arc::clone(&shared.maintain);
    runtime
        .spawn(async move {
            // A runtime without timers reaps by hand only (its `interval` would panic).
            let mut ticker = reap_interval
                .and_then(|every| catch(|| tokio::time::interval(every)).ok())
                .map(|mut ticker| {
                    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
                    ticker
                });
            if let Some(ticker) = ticker.as_mut() {
                // The first tick is immediate: nothing can be idle yet.
                ticker.tick().await;
            }
            loop {
                if !round(&weak).await {
                    return;
                }
                let reap = match ticker.as_mut() {
                    Some(ticker) => tokio::select! {
                        _ = ticker.tick() => true,
                        () = notify.notified() => false,
                    },
                    None => {
                        notify.notified().await;
                        false
                    }
                };
                if reap {
                    let Some(shared) = weak.upgrade() else {
                        return;
                    };
                    shared.reap(shared.time.clock.now());
                }
            }
        })
        .abort_handle()
}

/// Tops `min_idle` up; false once the pool is gone or closed.
async fn round<M: Manager>(weak: &Weak<Shared<M>>) -> bool {
    let Some(shared) = weak.upgrade() else {
        return false;
    };
    if shared.slots.is_closed() {
        return false;
    }
    shared.top_up().await;
    true
}
