//! The plain-text tables printed at the end of a run: one block per case ([`table`]) and, for
//! `--scaling`, one line per case and worker count ([`scaling_summary`]).

use std::fmt::Write as _;

use super::{cases, find, ratio, reference_of, Record};

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
/// `reference/slotpool` (the case's reference: see [`reference_of`]) and `slotpool/floor`.
pub fn table(records: &[Record]) -> String {
    let mut out = String::new();
    for case in cases(records) {
        let reference = reference_of(records, case).unwrap_or("reference");
        let _ = writeln!(
            out,
            "{case}  ({reference}/slotpool {}, slotpool/floor {})",
            fmt_ratio(ratio(records, case, reference, "slotpool")),
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

/// One line per case family and worker count: each implementation's ns/op and how many
/// times slower than slotpool it is.
pub fn scaling_summary(records: &[Record]) -> String {
    let mut out =
        String::from("scaling summary (ns/op; in brackets: that impl's ns/op over slotpool's)\n");
    for case in cases(records) {
        let Some(slot) = find(records, case, "slotpool") else {
            continue;
        };
        let _ = write!(out, "  {case:<34} slotpool {:>8.1}", slot.ns_per_op);
        for r in records
            .iter()
            .filter(|r| r.case == case && r.impl_name != "slotpool")
        {
            let _ = write!(
                out,
                "  {} {:.1} ({:.2}×)",
                r.impl_name,
                r.ns_per_op,
                r.ns_per_op / slot.ns_per_op
            );
        }
        out.push('\n');
    }
    out
}
