//! Reporting: what one implementation measured in one case ([`Record`]), the harness that
//! measures it ([`interleave`]: every implementation of a case in the same process,
//! interleaved, several times, the median of the repeats), and the three ways a run is shown:
//! a plain-text table ([`table`], a one-line-per-case [`summary`], and [`scaling_summary`] for
//! `--scaling`), the records as
//! JSON ([`write_json`]) and an SVG chart of the ratios ([`ratios_svg`]).
//!
//! Absolute times from one run are not comparable with another run on a shared machine; the
//! ratios between implementations measured here, in one process, are.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Record`] and reading records back ([`find`], [`ratio`], [`cases`], [`reference_of`]) |
//! | `harness.rs` | [`Settings`], [`Sample`], [`Runner`], [`interleave`], medians, wait histograms |
//! | `table.rs` | the plain-text tables |
//! | `json.rs` | the JSON file |
//! | `chart.rs` | the SVG chart |
//! | `publish.rs` | the published run (`bench/results/results.json`) and the README's and docs' figures generated from it |
//!
//! Nothing here knows a pool: the cases (`crate::cases`) hand the harness closures.

mod chart;
mod harness;
mod json;
pub mod publish;
mod table;

use serde::{Deserialize, Serialize};

pub use chart::ratios_svg;
pub use harness::{
    interleave, median, merge_waits, split, wait_histogram, Runner, Sample, Settings,
};
pub use json::write_json;
pub use table::{scaling_summary, summary, table};

/// One implementation's result for one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

// ---------------------------------------------------------------------------------------------
// Reading results
// ---------------------------------------------------------------------------------------------

/// One case of the comparison: its name and the function that measures it.
pub type Case = (&'static str, fn(&Settings) -> Vec<Record>);

/// Runs, in order, the `cases` whose name `want` accepts.
pub fn run_cases(cases: &[Case], settings: &Settings, want: impl Fn(&str) -> bool) -> Vec<Record> {
    cases
        .iter()
        .filter(|(name, _)| want(name))
        .flat_map(|(_, run)| run(settings))
        .collect()
}

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

/// The name of `case`'s reference design: its first implementation whose name starts with
/// `reference` (`reference` in most cases, `reference-depth1` in the depth-1 ones).
pub fn reference_of<'a>(records: &'a [Record], case: &str) -> Option<&'a str> {
    records
        .iter()
        .find(|r| r.case == case && r.impl_name.starts_with("reference"))
        .map(|r| r.impl_name.as_str())
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
