//! A hand-written SVG bar chart of the comparison's ratios (no plotting crate): per case, one
//! bar for `reference/slotpool` (how many times faster slotpool is than the case's reference
//! design, see [`reference_of`]) and one
//! for `slotpool/floor` (how far slotpool is above the least a reservation can cost), on a
//! logarithmic axis with a line at 1×.

use std::fmt::Write as _;

use super::{cases, ratio, reference_of, Record};

const WIDTH: f64 = 960.0;
const LEFT: f64 = 250.0;
const RIGHT: f64 = 70.0;
const TOP: f64 = 56.0;
const BAR: f64 = 16.0;
const BAR_GAP: f64 = 4.0;
const GROUP_GAP: f64 = 18.0;
const BOTTOM: f64 = 40.0;

/// The two ratios drawn per case: label, numerator, denominator, colour.
const SERIES: [(&str, &str, &str, &str); 2] = [
    ("reference / slotpool", "reference", "slotpool", "#3b6fb6"),
    ("slotpool / floor", "slotpool", "floor", "#e08a2c"),
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The chart as SVG text. Cases without a given ratio simply lack that bar.
pub fn ratios_svg(records: &[Record]) -> String {
    let cases = cases(records);
    let bars: Vec<Vec<Option<f64>>> = cases
        .iter()
        .map(|case| {
            SERIES
                .iter()
                .map(|&(_, n, d, _)| {
                    // The reference bar uses the case's own reference (e.g. `reference-depth1`).
                    let n = match n {
                        "reference" => reference_of(records, case).unwrap_or(n),
                        _ => n,
                    };
                    ratio(records, case, n, d).filter(|r| *r > 0.0)
                })
                .collect()
        })
        .collect();
    let values = bars.iter().flatten().flatten().copied();
    let (min, max) = values.fold((1.0f64, 10.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let lo = min.log10().floor().min(0.0);
    let hi = max.log10().ceil().max(1.0);
    let plot = WIDTH - LEFT - RIGHT;
    let x = |v: f64| LEFT + (v.log10() - lo) / (hi - lo) * plot;
    let group = SERIES.len() as f64 * (BAR + BAR_GAP) + GROUP_GAP;
    let height = TOP + cases.len() as f64 * group + BOTTOM;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="20" font-size="15" font-weight="bold">slotpool: ratios of ns/op (log scale, higher = larger gap)</text>"#
    );
    // Legend.
    for (i, (label, _, _, colour)) in SERIES.iter().enumerate() {
        let lx = LEFT + i as f64 * 200.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{lx}" y="30" width="12" height="12" fill="{colour}"/><text x="{}" y="40">{}</text>"#,
            lx + 16.0,
            escape(label)
        );
    }
    // Grid: one line per power of ten, labelled.
    let axis_bottom = height - BOTTOM + 6.0;
    let mut decade = lo;
    while decade <= hi + 1e-9 {
        let v = 10f64.powf(decade);
        let gx = x(v);
        let stroke = if decade.abs() < 1e-9 { "#333" } else { "#ddd" };
        let _ = writeln!(
            svg,
            r#"<line x1="{gx:.1}" y1="{TOP}" x2="{gx:.1}" y2="{axis_bottom}" stroke="{stroke}"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}×</text>"#,
            axis_bottom + 14.0,
            format_value(v)
        );
        decade += 1.0;
    }
    // Bars.
    for (c, (case, values)) in cases.iter().zip(&bars).enumerate() {
        let gy = TOP + c as f64 * group;
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 8.0,
            gy + BAR + 2.0,
            escape(case)
        );
        for (s, value) in values.iter().enumerate() {
            let Some(v) = *value else { continue };
            let by = gy + s as f64 * (BAR + BAR_GAP);
            let (x0, x1) = (x(1.0).min(x(v)), x(1.0).max(x(v)));
            let _ = writeln!(
                svg,
                r#"<rect x="{x0:.1}" y="{by:.1}" width="{:.1}" height="{BAR}" fill="{}"><title>{}: {}: {v:.2}×</title></rect><text x="{:.1}" y="{:.1}">{v:.2}×</text>"#,
                (x1 - x0).max(1.0),
                SERIES[s].3,
                escape(case),
                escape(SERIES[s].0),
                x1 + 4.0,
                by + BAR - 3.0
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

fn format_value(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}
