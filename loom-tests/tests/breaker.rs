//! Loom model of the circuit breaker: exactly one caller becomes the half-open probe.
#![cfg(slotpool_loom)]

use loom::sync::Arc;
use loom::thread;
use slotpool::__internal::breaker::{Admission, Breaker, BreakerState};
use slotpool_loom_tests::model;

/// Two callers race for the probe once the backoff has passed: exactly one gets it, the
/// other fails fast; the probe's failure reopens the breaker. Reached: each thread becomes
/// the probe in some execution.
#[test]
fn one_probe_after_backoff() {
    let reach = model(|reach| {
        let breaker = Arc::new(Breaker::new(1, 10));
        breaker.on_failure(0, false);
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.admit(|| 5), Err(5));
        let other = {
            let breaker = Arc::clone(&breaker);
            thread::spawn(move || breaker.admit(|| 10))
        };
        let mine = breaker.admit(|| 10);
        let theirs = other.join().unwrap();
        let probes = [mine, theirs]
            .iter()
            .filter(|a| **a == Ok(Admission::Probe))
            .count();
        assert_eq!(probes, 1, "{mine:?} {theirs:?}");
        reach.hit(if mine == Ok(Admission::Probe) {
            "main is the probe"
        } else {
            "the other is the probe"
        });
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        breaker.on_failure(11, true);
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.admit(|| 12), Err(9));
    });
    reach
        .explored(2)
        .reached_all(&["main is the probe", "the other is the probe"]);
}

/// A success racing a probe admission leaves the breaker closed or half-open with one probe,
/// never with two probes. Reached: the admission came first (it is the probe, and the success
/// closes the half-open breaker) and the success came first (a normal admission).
#[test]
fn success_vs_probe() {
    let reach = model(|reach| {
        let breaker = Arc::new(Breaker::new(1, 10));
        breaker.on_failure(0, false);
        let succeeder = {
            let breaker = Arc::clone(&breaker);
            thread::spawn(move || breaker.on_success())
        };
        let first = breaker.admit(|| 20);
        succeeder.join().unwrap();
        assert!(matches!(first, Ok(Admission::Probe | Admission::Normal)));
        reach.hit(if first == Ok(Admission::Probe) {
            "the probe was admitted before the success"
        } else {
            "the success came first"
        });
        assert_eq!(breaker.admit(|| 20), Ok(Admission::Normal));
    });
    reach.explored(2).reached_all(&[
        "the probe was admitted before the success",
        "the success came first",
    ]);
}
