//! A linearizability checker for histories recorded from real multi-threaded runs, generic
//! over the sequential specification it checks against (the stream pool's is in
//! `lin_stream.rs`; any pool with a sequential model can implement [`Spec`]).
//!
//! # Recording
//!
//! Every operation is an [`Event`]: what was asked ([`Spec::Op`]), what came back
//! ([`Spec::Ret`]), and two stamps from one [`Recorder`] clock, a `SeqCst` counter read just
//! before the call and just after it returned. Two operations whose stamps do not overlap
//! happened in that order in real time; overlapping ones were concurrent.
//!
//! # Checking (Wing and Gong, with Lowe's memoisation)
//!
//! A history is linearizable if its operations can be put in one sequence that respects
//! real time (an operation that returned before another was called comes first) and that the
//! specification, run op by op, accepts with the same results. [`check`] searches for such a
//! sequence depth first: from a configuration (the set of operations linearized so far and
//! the specification's state) it tries each operation that may come next (one called before
//! every pending operation's return), and every state the specification allows for it with
//! the recorded result. A configuration seen before is never explored again, which keeps
//! histories of a few hundred operations with a handful of threads fast. The specification
//! may be nondeterministic ([`Spec::apply`] returns every state the operation can lead to),
//! which is how internal steps the history cannot see (a stream's driver marking it ready) are
//! folded into the operations that observe them.
#![allow(dead_code)] // each checker test uses part of it

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many histories a checker test records and checks: a tenth of `default` (at least 3),
/// so that the README's `cargo test` stays brief in a debug build; `default` itself with
/// `LIN_RUNS=full` (what CI's optimised `lin` profile runs and the mutation suite's `lin:`
/// checks use); or `LIN_RUNS=N` runs (the sanitizer runs take a few; a long hunt takes many).
///
/// # Panics
/// If `LIN_RUNS` is set to anything but `full` or a positive number.
pub fn runs(default: u64) -> u64 {
    match std::env::var("LIN_RUNS") {
        Ok(runs) if runs == "full" => default,
        Ok(runs) => match runs.parse() {
            Ok(runs) if runs > 0 => runs,
            _ => panic!("LIN_RUNS={runs:?} is neither `full` nor a positive number of runs"),
        },
        Err(_) => (default / 10).max(3),
    }
}

/// A sequential specification: a state machine over operations and their results.
pub trait Spec: Clone + Eq + Hash + Debug {
    /// An operation as invoked.
    type Op: Debug + Clone;
    /// What it returned.
    type Ret: Debug + Clone;

    /// Every state `op` can lead to from `self` when it returned `ret`; empty when `ret` is not
    /// a result `op` can have here.
    fn apply(&self, op: &Self::Op, ret: &Self::Ret) -> Vec<Self>;
}

/// One operation of a history.
#[derive(Debug, Clone)]
pub struct Event<S: Spec> {
    /// Which thread or task ran it (for reports).
    pub thread: usize,
    pub op: S::Op,
    pub ret: S::Ret,
    /// The recorder's stamp before the call.
    pub call: u64,
    /// The recorder's stamp after the return.
    pub done: u64,
}

/// The clock every thread stamps its calls and returns with.
#[derive(Debug, Default)]
pub struct Recorder {
    clock: AtomicU64,
}

impl Recorder {
    /// A stamp: later than every stamp taken before it, in every thread.
    pub fn stamp(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// Runs one operation (`f` does it and says what it returned) and logs it with `call`, a
    /// stamp taken just before, and a stamp taken once it returned.
    pub fn finish<S: Spec, T>(
        &self,
        log: &mut Vec<Event<S>>,
        thread: usize,
        call: u64,
        op: S::Op,
        f: impl FnOnce() -> (T, S::Ret),
    ) -> T {
        let (value, ret) = f();
        let done = self.stamp();
        log.push(Event {
            thread,
            op,
            ret,
            call,
            done,
        });
        value
    }
}

/// A history that no sequence explains, with the longest prefix the search could linearize.
#[derive(Debug)]
pub struct Violation<S: Spec> {
    pub longest: Vec<Event<S>>,
    pub state: S,
    /// The operations that could have come next, none of which the specification accepts.
    pub stuck_on: Vec<Event<S>>,
}

/// How the search went (for reports and for bounding the test).
#[derive(Debug, Clone, Copy, Default)]
pub struct Searched {
    pub events: usize,
    pub configurations: usize,
}

/// Checks `history` against `initial`. Gives up (panics) past `max_configurations`, so a test
/// stays bounded even on a history that is hard to linearize.
pub fn check<S: Spec>(
    initial: S,
    history: &[Event<S>],
    max_configurations: usize,
) -> Result<Searched, Box<Violation<S>>> {
    match check_within(initial, history, max_configurations) {
        Verdict::Linearizable(searched) => Ok(searched),
        Verdict::Violation(violation) => Err(violation),
        Verdict::GaveUp(searched) => panic!(
            "the search passed {max_configurations} configurations on {} events",
            searched.events
        ),
    }
}

/// What [`check_within`] found.
#[derive(Debug)]
pub enum Verdict<S: Spec> {
    Linearizable(Searched),
    Violation(Box<Violation<S>>),
    /// The search passed its budget of configurations before it decided: a history too hard
    /// to decide within the budget, neither accepted nor refused.
    GaveUp(Searched),
}

/// [`check`], answering [`Verdict::GaveUp`] past `max_configurations` instead of panicking:
/// for recorded runs, where a rare history (many operations under way at once, each with
/// several hidden steps) can take the search minutes, and a test counts those it could not
/// decide rather than wait.
pub fn check_within<S: Spec>(
    initial: S,
    history: &[Event<S>],
    max_configurations: usize,
) -> Verdict<S> {
    let mut events: Vec<&Event<S>> = history.iter().collect();
    events.sort_by_key(|e| e.call);
    let n = events.len();
    let words = n.div_ceil(64);
    let mut seen: HashSet<(Vec<u64>, S)> = HashSet::new();
    // Depth-first: (linearized set, state, number linearized).
    let mut stack: Vec<(Vec<u64>, S, usize)> = vec![(vec![0; words], initial.clone(), 0)];
    let mut best: (usize, Vec<u64>, S) = (0, vec![0; words], initial);
    let mut searched = Searched {
        events: n,
        configurations: 0,
    };
    while let Some((done_set, state, count)) = stack.pop() {
        if count == n {
            return Verdict::Linearizable(searched);
        }
        searched.configurations += 1;
        if searched.configurations > max_configurations {
            return Verdict::GaveUp(searched);
        }
        if count > best.0 {
            best = (count, done_set.clone(), state.clone());
        }
        for i in candidates(&events, &done_set).into_iter().rev() {
            for next in state.apply(&events[i].op, &events[i].ret) {
                let mut set = done_set.clone();
                set[i / 64] |= 1 << (i % 64);
                if seen.insert((set.clone(), next.clone())) {
                    stack.push((set, next, count + 1));
                }
            }
        }
    }
    let (_, set, state) = best;
    let longest = (0..n)
        .filter(|&i| is_linearized(&set, i))
        .map(|i| events[i].clone())
        .collect();
    let stuck_on = candidates(&events, &set)
        .into_iter()
        .map(|i| events[i].clone())
        .collect();
    Verdict::Violation(Box::new(Violation {
        longest,
        state,
        stuck_on,
    }))
}

fn is_linearized(set: &[u64], i: usize) -> bool {
    set[i / 64] & (1 << (i % 64)) != 0
}

/// The events (indices into `events`, sorted by call) that may be linearized next: those not
/// in `set` that were called before the earliest return among the events not in `set`.
fn candidates<S: Spec>(events: &[&Event<S>], set: &[u64]) -> Vec<usize> {
    let mut earliest_return = u64::MAX;
    let mut candidates = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if is_linearized(set, i) {
            continue;
        }
        if e.call > earliest_return {
            break;
        }
        earliest_return = earliest_return.min(e.done);
        candidates.push(i);
    }
    // An event taken in before a later one returned earlier is no candidate after all.
    candidates.retain(|&i| events[i].call <= earliest_return);
    candidates
}

/// How many of `events` overlap at least one other in real time (for reports, and for tests
/// that must show they checked concurrent operations at all).
pub fn concurrent<'a, S: Spec + 'a>(events: impl IntoIterator<Item = &'a Event<S>>) -> usize {
    let mut events: Vec<&Event<S>> = events.into_iter().collect();
    events.sort_by_key(|e| e.call);
    let mut overlapping = vec![false; events.len()];
    let mut open: Vec<usize> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        open.retain(|&j| events[j].done > e.call);
        if !open.is_empty() {
            overlapping[i] = true;
            for &j in &open {
                overlapping[j] = true;
            }
        }
        open.push(i);
    }
    overlapping.into_iter().filter(|o| *o).count()
}
