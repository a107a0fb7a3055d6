//! Loom models (and, under `--cfg slotpool_shuttle`, shuttle tests) of slotpool's lock-free
//! protocols, and the helpers they share.
//!
//! # A model must be able to fail
//!
//! A model that passes proves only as much as the paths it explores. A model whose threads are
//! set up so that the race it is named for can never happen (the reaper returns early because
//! the value it would race for is taken before it starts, say) passes whatever the code does.
//! So every model here counts what it reaches:
//!
//! * **the path it is named for**: a [`Reach`] counter that the model bumps, in the execution
//!   where it happens, from something it can observe (which thread won, a future that returned
//!   `Pending` before it resolved, a predicate the protocol called, the state a thread saw);
//! * **the executions it explored**: more than one, or there was no race to explore.
//!
//! and asserts both after the checker returns:
//!
//! ```ignore
//! let reach = slotpool_loom_tests::model(|reach| {
//!     // ... set up, spawn, join ...
//!     reach.hit_if(waited, "the waiter slept and was woken");
//! });
//! reach.explored(2).reached("the waiter slept and was woken");
//! ```
//!
//! [`model`] is `loom::model` that counts executions; [`Reach`] itself is plain `std`
//! (its counts outlive the executions, which loom's own atomics must not), so the shuttle
//! tests use it the same way through [`explore`], which runs shuttle's randomized and PCT
//! schedulers over a fixed budget of seeds. [`waited`] wraps a future to tell whether it
//! returned `Pending` before it resolved.
//!
//! # Shuttle: beyond loom's reach
//!
//! Loom explores every interleaving of two or three threads doing a few operations each.
//! Scenarios with many threads, several slots, growth, reaping and cancellation at once are far
//! past what it can enumerate; the `shuttle_*` tests (built only under `--cfg
//! slotpool_shuttle`, which swaps the crate's facade for shuttle's primitives) run those on
//! the real code under shuttle's schedulers instead: each seed picks the random choices of one
//! run, so every failure is replayable. Shuttle runs every atomic access sequentially
//! consistent, so it checks interleavings, not orderings (loom's job).
//!
//! [`explore`] reads its budget from the environment: `SLOTPOOL_SHUTTLE_SEEDS` (how many
//! seeds, from 0; default 8), `SLOTPOOL_SHUTTLE_ITERATIONS` (schedules per seed and scheduler;
//! default 150), `SLOTPOOL_SHUTTLE_SEED` (run that one seed only), `SLOTPOOL_SHUTTLE_SCHEDULER`
//! (`random`, `pct` or `both`, the default) and `SLOTPOOL_SHUTTLE_PCT_DEPTH` (default 3). It
//! prints each seed before running it; a failure prints shuttle's encoded schedule, which
//! `SLOTPOOL_SHUTTLE_REPLAY=<schedule>` replays exactly (`docs/proofs.md` in the repository
//! shows the commands).
//!
//! Every model runs at `LOOM_MAX_PREEMPTIONS=3` in CI (`.ci/run`); bound 4 is for runs on
//! demand (see `docs/proofs.md`). The mutation suite in `mutants/` plants bugs one
//! at a time and checks that some model, test, fuzz replay or shuttle test catches each.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

/// Counts, across every execution of a model, the executions explored and how often each named
/// branch was reached. Cheap to clone (the clones share the counts). See the crate docs.
#[derive(Clone, Default)]
pub struct Reach {
    inner: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    executions: AtomicUsize,
    hits: Mutex<BTreeMap<&'static str, usize>>,
}

impl Reach {
    /// No executions, no branches reached.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the start of one execution ([`model`] calls it for you).
    pub fn execution(&self) {
        self.inner.executions.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that `branch` was reached in the current execution.
    pub fn hit(&self, branch: &'static str) {
        let mut hits = self
            .inner
            .hits
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *hits.entry(branch).or_default() += 1;
    }

    /// Records `branch` if `reached` holds; returns `reached`.
    pub fn hit_if(&self, reached: bool, branch: &'static str) -> bool {
        if reached {
            self.hit(branch);
        }
        reached
    }

    /// Executions recorded so far.
    pub fn executions(&self) -> usize {
        self.inner.executions.load(Ordering::Relaxed)
    }

    /// How many executions reached `branch`.
    pub fn hits(&self, branch: &str) -> usize {
        let hits = self
            .inner
            .hits
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        hits.get(branch).copied().unwrap_or(0)
    }

    /// Asserts that at least `at_least` executions were explored (and prints the counts, which
    /// `cargo test -- --nocapture` shows).
    #[track_caller]
    pub fn explored(&self, at_least: usize) -> &Self {
        eprintln!("{:?} at {}", self, std::panic::Location::caller());
        assert!(
            self.executions() >= at_least,
            "the model explored {} execution(s), expected at least {at_least}: nothing races ({self:?})",
            self.executions()
        );
        self
    }

    /// Asserts that `branch` was reached in at least one execution.
    #[track_caller]
    pub fn reached(&self, branch: &str) -> &Self {
        assert!(
            self.hits(branch) > 0,
            "no execution reached `{branch}`: the model does not explore the path it is named for ({self:?})"
        );
        self
    }

    /// [`Reach::reached`] for each of `branches`.
    #[track_caller]
    pub fn reached_all(&self, branches: &[&str]) -> &Self {
        for branch in branches {
            self.reached(branch);
        }
        self
    }
}

impl fmt::Debug for Reach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hits = self
            .inner
            .hits
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Reach")
            .field("executions", &self.executions())
            .field("hits", &*hits)
            .finish()
    }
}

/// `loom::model` that counts its executions in the returned [`Reach`], which `f` also gets
/// to record the branches it reaches.
#[cfg(slotpool_loom)]
pub fn model(f: impl Fn(&Reach) + Send + Sync + 'static) -> Reach {
    let reach = Reach::new();
    let counting = reach.clone();
    loom::model(move || {
        counting.execution();
        f(&counting);
    });
    reach
}

/// The shuttle budget of [`explore`] (see the crate docs for the variables).
#[cfg(slotpool_shuttle)]
#[derive(Debug, Clone)]
pub struct Budget {
    /// Seeds to run, each under the chosen schedulers.
    pub seeds: Vec<u64>,
    /// Schedules per seed and scheduler.
    pub iterations: usize,
    /// Run shuttle's randomized scheduler.
    pub random: bool,
    /// Run shuttle's PCT scheduler.
    pub pct: bool,
    /// The PCT scheduler's depth (priority change points per schedule, plus one).
    pub pct_depth: usize,
}

#[cfg(slotpool_shuttle)]
impl Budget {
    /// The budget the environment asks for, or CI's default.
    pub fn from_env() -> Self {
        fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
            match std::env::var(name) {
                Ok(value) => value
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
                Err(_) => default,
            }
        }
        let seeds = match std::env::var("SLOTPOOL_SHUTTLE_SEED") {
            Ok(seed) => vec![seed
                .parse()
                .unwrap_or_else(|_| panic!("SLOTPOOL_SHUTTLE_SEED={seed} is not a number"))],
            Err(_) => (0..var("SLOTPOOL_SHUTTLE_SEEDS", 8u64)).collect(),
        };
        let scheduler = std::env::var("SLOTPOOL_SHUTTLE_SCHEDULER").unwrap_or_default();
        let (random, pct) = match scheduler.as_str() {
            "" | "both" => (true, true),
            "random" => (true, false),
            "pct" => (false, true),
            other => panic!("SLOTPOOL_SHUTTLE_SCHEDULER={other}: random, pct or both"),
        };
        Self {
            seeds,
            iterations: var("SLOTPOOL_SHUTTLE_ITERATIONS", 150),
            random,
            pct,
            pct_depth: var("SLOTPOOL_SHUTTLE_PCT_DEPTH", 3),
        }
    }
}

/// Runs `f` under shuttle for the [`Budget`] the environment asks for: every seed under the
/// randomized and the PCT scheduler, or replays one encoded schedule
/// (`SLOTPOOL_SHUTTLE_REPLAY`). Counts executions and branches in the returned [`Reach`], as
/// [`model`] does for loom.
#[cfg(slotpool_shuttle)]
pub fn explore(name: &str, f: impl Fn(&Reach) + Send + Sync + 'static) -> Reach {
    use shuttle::scheduler::{PctScheduler, RandomScheduler};
    use shuttle::{Config, Runner};

    let reach = Reach::new();
    let counting = reach.clone();
    let f = Arc::new(move || {
        counting.execution();
        f(&counting);
    });
    let config = || {
        let mut config = Config::new();
        // Shuttle warns once that it runs every ordering as SeqCst; orderings are loom's job.
        config.silence_warnings = true;
        config
    };
    if let Ok(schedule) = std::env::var("SLOTPOOL_SHUTTLE_REPLAY") {
        eprintln!("shuttle {name}: replaying the given schedule");
        let f = Arc::clone(&f);
        shuttle::replay(move || f(), &schedule);
        return reach;
    }
    let budget = Budget::from_env();
    for &seed in &budget.seeds {
        if budget.random {
            eprintln!(
                "shuttle {name}: random scheduler, seed {seed}, {} schedules (SLOTPOOL_SHUTTLE_SEED={seed} SLOTPOOL_SHUTTLE_SCHEDULER=random reruns it)",
                budget.iterations
            );
            let f = Arc::clone(&f);
            Runner::new(
                RandomScheduler::new_from_seed(seed, budget.iterations),
                config(),
            )
            .run(move || f());
        }
        if budget.pct {
            eprintln!(
                "shuttle {name}: PCT scheduler depth {}, seed {seed}, {} schedules (SLOTPOOL_SHUTTLE_SEED={seed} SLOTPOOL_SHUTTLE_SCHEDULER=pct reruns it)",
                budget.pct_depth, budget.iterations
            );
            let f = Arc::clone(&f);
            Runner::new(
                PctScheduler::new_from_seed(seed, budget.pct_depth, budget.iterations),
                config(),
            )
            .run(move || f());
        }
    }
    reach
}

/// A future that remembers whether `inner` returned `Pending` before it resolved: resolves to
/// `(output, waited)`. Use it to count the executions in which a waiter really slept.
pub fn waited<F: Future>(inner: F) -> Waited<F> {
    Waited {
        inner: Box::pin(inner),
        waited: false,
    }
}

/// Future of [`waited`].
pub struct Waited<F> {
    inner: Pin<Box<F>>,
    waited: bool,
}

impl<F: Future> Future for Waited<F> {
    type Output = (F::Output, bool);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready((output, self.waited)),
            Poll::Pending => {
                self.waited = true;
                Poll::Pending
            }
        }
    }
}

impl<F> fmt::Debug for Waited<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waited")
            .field("waited", &self.waited)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reach_counts_branches_and_executions() {
        let reach = Reach::new();
        reach.execution();
        reach.execution();
        assert!(reach.hit_if(true, "a"));
        assert!(!reach.hit_if(false, "b"));
        reach.explored(2).reached("a");
        assert_eq!((reach.hits("a"), reach.hits("b")), (1, 0));
    }

    #[test]
    #[should_panic(expected = "no execution reached `b`")]
    fn reach_fails_an_unreached_branch() {
        let reach = Reach::new();
        reach.execution();
        reach.reached("b");
    }

    #[test]
    #[should_panic(expected = "explored 1 execution(s)")]
    fn reach_fails_a_single_execution() {
        let reach = Reach::new();
        reach.execution();
        reach.explored(2);
    }

    #[test]
    fn waited_tells_a_pending_poll() {
        let mut ready = waited(std::future::ready(5));
        let cx = &mut Context::from_waker(std::task::Waker::noop());
        assert_eq!(Pin::new(&mut ready).poll(cx), Poll::Ready((5, false)));
        let mut once = false;
        let mut later = waited(std::future::poll_fn(move |_| {
            if std::mem::replace(&mut once, true) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }));
        assert!(Pin::new(&mut later).poll(cx).is_pending());
        assert_eq!(Pin::new(&mut later).poll(cx), Poll::Ready(((), true)));
    }
}
