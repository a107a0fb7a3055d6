//! A `metrics` recorder for tests: every registered counter or gauge is kept by name and
//! labels (`name{k=v,...}`, labels sorted) so a test can read what a pool exported, and every
//! histogram keeps the samples recorded in it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use metrics::{Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata};
use metrics::{Recorder, SharedString, Unit};
use parking_lot::Mutex;

/// A value cell that serves as both a counter and a gauge (gauge values as f64 bits).
#[derive(Default)]
pub struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::SeqCst);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }
    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::SeqCst);
    }
}

impl Cell {
    fn update(&self, f: impl Fn(f64) -> f64) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |bits| {
                Some(f(f64::from_bits(bits)).to_bits())
            });
    }
}

/// The samples recorded in one histogram, in order.
#[derive(Default)]
pub struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().push(value);
    }
}

/// Records every registered handle by name and labels.
#[derive(Default)]
pub struct Capture(
    Mutex<HashMap<String, Arc<Cell>>>,
    Mutex<HashMap<String, Arc<Samples>>>,
);

/// `name{k=v,...}`, labels sorted.
fn key_name(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Capture {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        Arc::clone(self.0.lock().entry(key_name(key)).or_default())
    }

    /// The samples recorded so far in histogram `name` (`name{k=v,...}`); none if it was
    /// never registered.
    pub fn samples(&self, name: &str) -> Vec<f64> {
        self.1
            .lock()
            .get(name)
            .map_or_else(Vec::new, |samples| samples.0.lock().clone())
    }

    /// Every histogram registered so far, by `name{k=v,...}`.
    pub fn histograms(&self) -> Vec<String> {
        let mut names: Vec<String> = self.1.lock().keys().cloned().collect();
        names.sort();
        names
    }

    pub fn counter(&self, name: &str) -> u64 {
        self.get(name)
            .map_or(u64::MAX, |c| c.0.load(Ordering::SeqCst))
    }

    pub fn gauge(&self, name: &str) -> f64 {
        self.get(name)
            .map_or(f64::NAN, |c| f64::from_bits(c.0.load(Ordering::SeqCst)))
    }

    pub fn get(&self, name: &str) -> Option<Arc<Cell>> {
        self.0.lock().get(name).cloned()
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::clone(self.1.lock().entry(key_name(key)).or_default()))
    }
}
