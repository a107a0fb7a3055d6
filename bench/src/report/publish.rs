//! The published results: one full run of the comparison kept in the repository
//! (`bench/results/results.json`, with the commit it measured), and every figure the README
//! and `docs/benchmarks.md` show, generated from it: the README's summary table, the full
//! table in the benchmarks doc and the ratio chart (`docs/images/ratios.svg`).
//!
//! `slotpool-bench --record` writes the file after a full run and renders the rest;
//! `--render` renders again from the file; `--check-rendered` (CI) fails if any of them is not
//! what the file says. The generated parts of the two Markdown files sit between
//! `<!-- results:<name>:start -->` and `<!-- results:<name>:end -->` markers; everything else
//! in them is prose that quotes no figure of a run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{cases, find, ratio, ratios_svg, reference_of, Record};

/// A run kept in the repository.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Published {
    /// The commit measured (`git rev-parse HEAD`), with `-dirty` if the tree had changes.
    pub commit: String,
    /// When (UTC date).
    pub date: String,
    /// The machine, in words.
    pub machine: String,
    /// `full` (the only mode worth publishing).
    pub mode: String,
    /// The records, in the order they ran.
    pub records: Vec<Record>,
}

/// Where each generated file lives, from the workspace root.
pub const RESULTS: &str = "bench/results/results.json";
const README: &str = "README.md";
const BENCHMARKS: &str = "docs/benchmarks.md";
const CHART: &str = "docs/images/ratios.svg";

/// The cases the README's summary shows (the rest are in the benchmarks doc).
const README_CASES: &[&str] = &[
    "stream/uncontended",
    "stream/8-tasks-2-workers",
    "keyed/uncontended",
    "session/hot-acquire-8-tasks",
    "client/8-tasks-2-workers",
    "managed/uncontended",
    "managed/8-tasks-2-workers",
    "managed/saturated",
    "postgres/pool-only-8-tasks",
    "e2e/concurrency-64",
    "postgres/select-1-concurrency-16",
];

/// The workspace root (this crate's parent).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the bench crate sits in the workspace")
        .to_path_buf()
}

/// The commit of the tree at `root`, `-dirty` if it has uncommitted changes.
pub fn commit(root: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|status| !status.is_empty());
    if dirty {
        format!("{head}-dirty")
    } else {
        head
    }
}

/// Reads the published run.
///
/// # Errors
/// The file is missing or not a published run.
pub fn read(root: &Path) -> Result<Published, String> {
    let path = root.join(RESULTS);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `published` as the published run.
///
/// # Errors
/// Any I/O or serialization error.
pub fn write(root: &Path, published: &Published) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(published).map_err(std::io::Error::other)?;
    std::fs::write(root.join(RESULTS), json + "\n")
}

/// Every generated file's path and the contents `published` gives it (the Markdown files with
/// their generated parts replaced, the rest kept).
///
/// # Errors
/// A Markdown file is missing or has no markers for its part.
pub fn rendered(root: &Path, published: &Published) -> Result<Vec<(PathBuf, String)>, String> {
    let mut files = Vec::new();
    for (file, name, part) in [
        (README, "readme", readme_table(published)),
        (BENCHMARKS, "benchmarks", full_table(published)),
    ] {
        let path = root.join(file);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        files.push((
            path,
            splice(&text, name, &part).map_err(|e| format!("{file}: {e}"))?,
        ));
    }
    files.push((root.join(CHART), ratios_svg(&published.records)));
    Ok(files)
}

/// `text` with the part between its `name` markers replaced by `part`.
pub fn splice(text: &str, name: &str, part: &str) -> Result<String, String> {
    let start = format!("<!-- results:{name}:start -->");
    let end = format!("<!-- results:{name}:end -->");
    let a = text
        .find(&start)
        .ok_or_else(|| format!("no `{start}` marker"))?;
    let b = text
        .find(&end)
        .ok_or_else(|| format!("no `{end}` marker"))?;
    if b < a {
        return Err(format!("`{end}` comes before `{start}`"));
    }
    Ok(format!("{}{start}\n{part}{}", &text[..a], &text[b..]))
}

/// Nanoseconds as the tables show them: microseconds above 10 µs, three significant digits.
fn ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "n/a".into();
    }
    if ns >= 10_000.0 {
        return format!("{:.1} µs", ns / 1000.0);
    }
    if ns >= 100.0 {
        format!("{ns:.0}")
    } else {
        format!("{ns:.1}")
    }
}

fn times(r: Option<f64>) -> String {
    r.filter(|r| r.is_finite())
        .map_or_else(|| "n/a".into(), |r| format!("{r:.2}×"))
}

fn provenance(p: &Published) -> String {
    let short = &p.commit[..p.commit.len().min(12)];
    format!(
        "*Run of {} at commit `{short}`, {}, {} mode.*\n",
        p.date, p.machine, p.mode
    )
}

/// The README's summary: for each chosen case, slotpool's time, every other implementation's
/// and how many times slotpool's time theirs is.
pub fn readme_table(p: &Published) -> String {
    let records = &p.records;
    let mut out = String::from(
        "| case | slotpool ns/op | others, ns/op | their time ÷ slotpool's |\n| --- | --- | --- | --- |\n",
    );
    for &case in README_CASES {
        let Some(slot) = find(records, case, "slotpool") else {
            continue;
        };
        let others: Vec<&Record> = records
            .iter()
            .filter(|r| r.case == case && r.impl_name != "slotpool")
            .collect();
        let names = others
            .iter()
            .map(|r| format!("{} {}", r.impl_name, ns(r.ns_per_op)))
            .collect::<Vec<_>>()
            .join(", ");
        let ratios = others
            .iter()
            .map(|r| times(ratio(records, case, &r.impl_name, "slotpool")))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "| {case} | {} | {names} | {ratios} |",
            ns(slot.ns_per_op)
        );
    }
    out.push('\n');
    out.push_str(&provenance(p));
    out.push('\n');
    out.push_str("![Ratios of the published run, log scale](docs/images/ratios.svg)\n");
    out
}

/// The benchmarks doc's table: every case and implementation, its time and its ratio to
/// slotpool's (above 1×: slotpool took less time), and the waits where the case measures them.
pub fn full_table(p: &Published) -> String {
    let records = &p.records;
    let mut out = provenance(p);
    out.push_str(
        "\n| case | impl | ns/op | ÷ slotpool | p99 wait | max wait |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for case in cases(records) {
        let reference = reference_of(records, case);
        for r in records.iter().filter(|r| r.case == case) {
            let vs = if r.impl_name == "slotpool" {
                "1×".to_string()
            } else {
                times(ratio(records, case, &r.impl_name, "slotpool"))
            };
            let mark = if Some(r.impl_name.as_str()) == reference {
                " (reference)"
            } else {
                ""
            };
            let wait = |v: Option<u64>| v.map_or_else(|| "".to_string(), |v| ns(v as f64));
            let _ = writeln!(
                out,
                "| {case} | {}{mark} | {} | {vs} | {} | {} |",
                r.impl_name,
                ns(r.ns_per_op),
                wait(r.p99_ns),
                wait(r.max_ns),
            );
        }
    }
    out
}
