//! The plain-text tables printed at the end of a run: one block per case ([`table`]), one
//! line per case with the ratio that matters ([`summary`]) and, for `--scaling`, one line per
//! case and worker count ([`scaling_summary`]).

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

/// Baselines that are not pools a user would pick but the least a step can cost: the
/// floor, a bare tokio `Semaphore` permit, a hand-rolled semaphore-and-mutex pool, no pool;
/// and slotpool under another setting (`slotpool-fifo`), which is no peer either.
fn is_baseline(impl_name: &str) -> bool {
    matches!(
        impl_name,
        "floor"
            | "tokio-semaphore"
            | "semaphore-mutex"
            | "no-pool"
            | "no-pool-rotating"
            | "slotpool-fifo"
    )
}

/// Implementations that are neither slotpool, a reference design nor a baseline: the pools a
/// user would otherwise pick (deadpool, bb8, ...).
fn peers<'a>(records: &'a [Record], case: &str) -> impl Iterator<Item = &'a Record> + 'a {
    let case = case.to_string();
    records.iter().filter(move |r| {
        r.case == case
            && r.impl_name != "slotpool"
            && !is_baseline(&r.impl_name)
            && !r.impl_name.starts_with("reference")
    })
}

/// One line per case with the ratios that matter: how many times faster slotpool is than the
/// case's reference design (`reference/slotpool`) and than the fastest pool a user would pick
/// instead (`peer/slotpool`; below 1× the peer was faster), and where the case measures a
/// baseline, slotpool's time over the first one's (`slotpool/floor`: how far above the least
/// the step can cost). Above 1× in the first two means slotpool took less time.
pub fn summary(records: &[Record]) -> String {
    let mut out = String::from(
        "summary (ratios within this run; above 1x: slotpool took less time per operation)\n",
    );
    for case in cases(records) {
        let Some(slot) = find(records, case, "slotpool") else {
            continue;
        };
        let mut parts = Vec::new();
        if let Some(reference) = reference_of(records, case) {
            parts.push(format!(
                "{reference}/slotpool {}",
                fmt_ratio(ratio(records, case, reference, "slotpool"))
            ));
        }
        let fastest = peers(records, case)
            .filter(|r| r.ns_per_op.is_finite() && r.ns_per_op > 0.0)
            .min_by(|a, b| a.ns_per_op.total_cmp(&b.ns_per_op));
        if let Some(peer) = fastest {
            parts.push(format!(
                "fastest peer {}/slotpool {}",
                peer.impl_name,
                fmt_ratio(Some(peer.ns_per_op / slot.ns_per_op))
            ));
        }
        let baseline = records
            .iter()
            .find(|r| r.case == case && is_baseline(&r.impl_name));
        if let Some(baseline) = baseline {
            parts.push(format!(
                "slotpool/{} {}",
                baseline.impl_name,
                fmt_ratio(ratio(records, case, "slotpool", &baseline.impl_name))
            ));
        }
        if parts.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "  {case:<36} {:>10} ns/op  {}",
            fmt_ns(slot.ns_per_op),
            parts.join("; ")
        );
    }
    out
}
