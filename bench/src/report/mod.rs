//! Side-by-side measurement: every implementation of a case runs in the same process,
//! interleaved, several times; a case reports the median of its repeats.
//!
//! Absolute times from one run are not comparable with another run on a shared machine; the
//! ratios between implementations measured here, in one process, are.

pub mod chart;

use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// Median over repeats of the longest wait, where the case measures waits (shows
    /// starvation that the percentiles can hide when few operations wait at all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ns: Option<u64>,
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

// ---------------------------------------------------------------------------------------------
// The floor
// ---------------------------------------------------------------------------------------------

/// The least any reservation can cost: one CAS-below-limit to take a unit, one `fetch_sub` to
/// give it back, on one shared, cache-padded counter. Measured in the same process as the
/// pools, as `floor`.
#[derive(Debug)]
pub struct Floor {
    /// Units taken. INVARIANT: `<= limit`.
    used: crossbeam_utils::CachePadded<AtomicUsize>,
    limit: usize,
}

impl Floor {
    /// A counter of `limit` units.
    pub fn new(limit: usize) -> Self {
        Self {
            used: crossbeam_utils::CachePadded::new(AtomicUsize::new(0)),
            limit,
        }
    }

    /// Takes one unit if fewer than `limit` are taken.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        let mut current = self.used.load(Ordering::Relaxed);
        loop {
            if current >= self.limit {
                return false;
            }
            match self.used.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                // Another taker or releaser moved the counter: retry against its value.
                Err(actual) => current = actual,
            }
        }
    }

    /// Gives one unit back.
    #[inline]
    pub fn release(&self) {
        self.used.fetch_sub(1, Ordering::Release);
    }

    /// Units taken now.
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

// ---------------------------------------------------------------------------------------------
// Reading results
// ---------------------------------------------------------------------------------------------

/// The record of `impl_name` for `case`, if measured.
pub fn find<'a>(records: &'a [Record], case: &str, impl_name: &str) -> Option<&'a Record> {
    records
        .iter()
        .find(|r| r.case == case && r.impl_name == impl_name)
}

/// `ns_per_op` of `numerator` over that of `denominator` in `case` (e.g. `reference` over
/// `slotpool`: how many times faster slotpool is).
pub fn ratio(records: &[Record], case: &str, numerator: &str, denominator: &str) -> Option<f64> {
    let n = find(records, case, numerator)?.ns_per_op;
    let d = find(records, case, denominator)?.ns_per_op;
    (d > 0.0 && n.is_finite() && d.is_finite()).then(|| n / d)
}

/// Case names in first-seen order.
pub fn cases(records: &[Record]) -> Vec<&str> {
    let mut seen: Vec<&str> = Vec::new();
    for r in records {
        if !seen.contains(&r.case.as_str()) {
            seen.push(&r.case);
        }
    }
    seen
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 10_000_000.0 {
        format!("{:.1} ms", ns / 1e6)
    } else if ns >= 100_000.0 {
        format!("{:.1} µs", ns / 1000.0)
    } else if ns >= 100.0 {
        format!("{ns:.0}")
    } else {
        format!("{ns:.1}")
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_string(), |r| format!("{r:.2}×"))
}

/// A plain-text table per case: impl, ns/op (waits, where measured, in ns unless marked µs
/// or ms), wait percentiles and the longest wait where measured, and the ratios
/// `reference/slotpool` and `slotpool/floor`.
pub fn table(records: &[Record]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for case in cases(records) {
        let _ = writeln!(
            out,
            "{case}  (reference/slotpool {}, slotpool/floor {})",
            fmt_ratio(ratio(records, case, "reference", "slotpool")),
            fmt_ratio(ratio(records, case, "slotpool", "floor")),
        );
        let _ = writeln!(
            out,
            "  {:<15} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
            "impl", "ns/op", "p50 wait", "p99 wait", "p999 wait", "max wait", "ops", "repeats"
        );
        let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| fmt_ns(v as f64));
        for r in records.iter().filter(|r| r.case == case) {
            let _ = writeln!(
                out,
                "  {:<15} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
                r.impl_name,
                fmt_ns(r.ns_per_op),
                opt(r.p50_ns),
                opt(r.p99_ns),
                opt(r.p999_ns),
                opt(r.max_ns),
                r.ops,
                r.repeats
            );
        }
        out.push('\n');
    }
    out
}

/// Writes `records` as a pretty JSON array to `path`, creating its directory.
///
/// # Errors
/// Any I/O or serialization error.
pub fn write_json(path: &std::path::Path, records: &[Record]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let json = serde_json::to_string_pretty(records).map_err(std::io::Error::other)?;
    std::fs::write(path, json + "\n")
}
