//! Loom model of the circuit breaker: exactly one caller becomes the half-open probe.
#![cfg(slotpool_loom)]

use loom::sync::Arc;
use loom::thread;
use slotpool::breaker::{Admission, Breaker, BreakerState};

/// Two callers race for the probe once the backoff has passed: exactly one gets it, the
/// other fails fast; the probe's failure reopens the breaker.
#[test]
fn one_probe_after_backoff() {
    loom::model(|| {
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
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        breaker.on_failure(11, true);
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.admit(|| 12), Err(9));
    });
}

/// A success racing a probe admission leaves the breaker closed or half-open with one probe,
/// never with two probes.
#[test]
fn success_vs_probe() {
    loom::model(|| {
        let breaker = Arc::new(Breaker::new(1, 10));
        breaker.on_failure(0, false);
        let succeeder = {
            let breaker = Arc::clone(&breaker);
            thread::spawn(move || breaker.on_success())
        };
        let first = breaker.admit(|| 20);
        succeeder.join().unwrap();
        assert!(matches!(first, Ok(Admission::Probe | Admission::Normal)));
        assert_eq!(breaker.admit(|| 20), Ok(Admission::Normal));
    });
}
