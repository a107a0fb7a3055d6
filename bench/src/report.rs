//! Side-by-side measurement: every implementation of a case runs in the same process,
//! interleaved, several times; a case reports the median of its repeats.
//!
//! Absolute times from one run are not comparable with another run on a shared machine; the
//! ratios between implementations measured here, in one process, are.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// One implementation's result for one case.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Case name, e.g. `stream/uncontended`.
    pub case: String,
    /// Implementation name: `slotpool`, `reference`, `floor`, or a peer's name.
    #[serde(rename = "impl")]
    pub impl_name: String,
    /// Median over repeats of wall time per operation, in nanoseconds.
    pub ns_per_op: f64,
    /// Median over repeats of the 50th percentile wait, where the case measures waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ns: Option<u64>,
    /// Median over repeats of the 99th percentile wait, where the case measures waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<u64>,
    /// Median over repeats of the 99.9th percentile wait, where the case measures waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999_ns: Option<u64>,
    /// Operations per repeat.
    pub ops: u64,
    /// Number of repeats the median is taken over.
    pub repeats: usize,
}

/// What one timed run of an implementation produced.
#[derive(Debug)]
pub struct Sample {
    /// Operations completed.
    pub ops: u64,
    /// Wall time for all of them.
    pub elapsed: Duration,
    /// Per-operation wait times in nanoseconds, for cases that measure waits.
    pub waits: Option<Histogram<u64>>,
}

impl Sample {
    /// A sample without wait times.
    pub fn timed(ops: u64, elapsed: Duration) -> Self {
        Self {
            ops,
            elapsed,
            waits: None,
        }
    }
}

/// How long and how often to measure.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Repeats per implementation (interleaved); the median is reported.
    pub repeats: usize,
    /// Scale factor for each case's operation count (1.0 = full run).
    pub scale: f64,
}

impl Settings {
    /// The full comparison (about two minutes for the stream cases).
    pub fn full() -> Self {
        Self {
            repeats: 7,
            scale: 1.0,
        }
    }

    /// `--quick`: fewer repeats, fewer operations.
    pub fn quick() -> Self {
        Self {
            repeats: 3,
            scale: 0.15,
        }
    }

    /// The smoke run CI uses: proves every case runs, measures nothing worth reading.
    pub fn smoke() -> Self {
        Self {
            repeats: 1,
            scale: 0.002,
        }
    }

    /// Scales a case's full operation count, keeping at least `min`.
    pub fn ops(&self, full: u64, min: u64) -> u64 {
        ((full as f64 * self.scale) as u64).max(min)
    }
}

/// An implementation under test: a name and a closure that runs `ops` operations.
pub type Runner<'a> = (&'a str, Box<dyn FnMut(u64) -> Sample + 'a>);

/// Runs every implementation `settings.repeats` times, interleaved (a, b, c, a, b, c, ...),
/// after one untimed warm-up each, and returns one [`Record`] per implementation.
pub fn interleave(case: &str, ops: u64, settings: &Settings, mut impls: Vec<Runner<'_>>) -> Vec<Record> {
    for (_, run) in impls.iter_mut() {
        let _ = run((ops / 10).max(1));
    }
    let mut samples: Vec<Vec<Sample>> = impls.iter().map(|_| Vec::new()).collect();
    for _ in 0..settings.repeats {
        for (i, (_, run)) in impls.iter_mut().enumerate() {
            samples[i].push(run(ops));
        }
    }
    impls
        .iter()
        .zip(samples)
        .map(|((name, _), samples)| summarize(case, name, settings.repeats, &samples))
        .collect()
}

fn summarize(case: &str, name: &str, repeats: usize, samples: &[Sample]) -> Record {
    let ns: Vec<f64> = samples
        .iter()
        .map(|s| s.elapsed.as_nanos() as f64 / s.ops.max(1) as f64)
        .collect();
    let pct = |q: f64| -> Option<u64> {
        let values: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.waits.as_ref().map(|h| h.value_at_quantile(q) as f64))
            .collect();
        (!values.is_empty()).then(|| median(values) as u64)
    };
    Record {
        case: case.to_string(),
        impl_name: name.to_string(),
        ns_per_op: median(ns),
        p50_ns: pct(0.50),
        p99_ns: pct(0.99),
        p999_ns: pct(0.999),
        ops: samples.first().map_or(0, |s| s.ops),
        repeats,
    }
}

/// Median of a non-empty list (the mean of the middle two for an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// A histogram for wait times from 1 ns to 100 s with 3 significant digits.
pub fn wait_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).unwrap_or_else(|_| Histogram::new(3).expect("3 significant digits is valid"))
}
