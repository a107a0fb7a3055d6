//! The measuring harness: how long and how often to measure ([`Settings`]), what one timed run
//! produced ([`Sample`]), and [`interleave`], which runs every implementation of a case in
//! alternating order, several times, after one untimed warm-up each, and reduces each one's
//! samples to a [`Record`] of medians.

use std::time::Duration;

use hdrhistogram::Histogram;

use super::Record;

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
            scale: 0.4,
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

/// Splits about `ops` operations over `tasks` tasks: (per task, at least 1; total done).
pub fn split(ops: u64, tasks: usize) -> (u64, u64) {
    let per = (ops / tasks as u64).max(1);
    (per, per * tasks as u64)
}

/// An implementation under test: a name and a closure that runs `ops` operations.
pub type Runner<'a> = (&'a str, Box<dyn FnMut(u64) -> Sample + 'a>);

/// Runs every implementation `settings.repeats` times, interleaved in alternating order
/// (a, b, c, then c, b, a, ...),
/// after one untimed warm-up each, and returns one [`Record`] per implementation.
pub fn interleave(
    case: &str,
    ops: u64,
    settings: &Settings,
    mut impls: Vec<Runner<'_>>,
) -> Vec<Record> {
    for (_, run) in impls.iter_mut() {
        let _ = run((ops / 10).max(1));
    }
    let mut samples: Vec<Vec<Sample>> = impls.iter().map(|_| Vec::new()).collect();
    for repeat in 0..settings.repeats {
        // Alternate the order between repeats: whichever implementation runs right after
        // another inherits its warm (or disturbed) caches, scheduler and allocator state, so
        // a fixed order would favour one position.
        let mut order: Vec<usize> = (0..impls.len()).collect();
        if repeat % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (_, run) = &mut impls[i];
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
        max_ns: {
            let values: Vec<f64> = samples
                .iter()
                .filter_map(|s| s.waits.as_ref().map(|h| h.max() as f64))
                .collect();
            (!values.is_empty()).then(|| median(values) as u64)
        },
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
    Histogram::new_with_bounds(1, 100_000_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).expect("3 significant digits is valid"))
}

/// One histogram holding every sample of `histograms` (all made by [`wait_histogram`]).
pub fn merge_waits(histograms: impl IntoIterator<Item = Histogram<u64>>) -> Histogram<u64> {
    let mut all = wait_histogram();
    for h in histograms {
        all.add(&h).expect("histograms share bounds");
    }
    all
}
