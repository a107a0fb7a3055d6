//! `slotpool-bench`: the side-by-side comparison of slotpool, the reference designs and the
//! floor. Runs the case groups of `slotpool_bench::cases` in order (`stream/`,
//! `stream-depth1/`, `keyed/`, `session/`, `client/`, `managed/`, `e2e/`, `postgres/`; or the
//! `scaling/` cases), prints a table per case, writes the records as JSON and the ratios as an
//! SVG chart (`slotpool_bench::report`). The `postgres/` cases start a throwaway server through
//! `bench/postgres/start.sh` and stop it at the end; where none can be started they are
//! reported as skipped, with the reason.
//!
//! ```text
//! cargo run --release -p slotpool-bench [-- --quick|--smoke] [--json PATH] [--svg PATH] [--only PREFIX]
//! cargo run --release -p slotpool-bench -- --scaling [--workers 1,2,4,8,16]
//! cargo run --release -p slotpool-bench -- --faults [--quick] [--json PATH] [--only PREFIX]
//! ```
//!
//! `--faults` runs the fault bench instead (`slotpool_bench::faults`): the PostgreSQL pools
//! under a restart, terminated backends, an outage, a blackhole and slow queries, against a
//! server of its own, then the stream pools over tonic (slotpool's and R1's) with their peer
//! killed, blackholed and slowed; a table of failures, late callers, leaks, recovery times and
//! connection attempts, and the records as JSON (default `target/slotpool-bench/faults.json`).
//! It fails when slotpool's pool leaks in any scenario.

use std::path::PathBuf;
use std::process::ExitCode;

use slotpool_bench::cases::{
    client, e2e, keyed, managed, postgres, scaling, session, stream, stream_depth1,
};
use slotpool_bench::faults;
use slotpool_bench::report::{self, publish, run_cases, Case, Record, Settings};

const USAGE: &str = "\
usage: slotpool-bench [--quick | --smoke] [--json PATH] [--svg PATH] [--only PREFIX]
                      [--repeats N] [--scaling [--workers LIST]] [--faults]

  --quick         fewer repeats and operations (about 20 s)
  --smoke         proves every case runs; measures nothing worth reading
  --json PATH     where to write the records (default target/slotpool-bench/results.json)
  --svg PATH      where to write the ratio chart (default target/slotpool-bench/ratios.svg)
  --only PREFIX   run only the cases whose name starts with PREFIX (e.g. stream/saturated)
  --repeats N     repeats per implementation (default: 7 full, 3 quick, 1 smoke)
  --scaling       run the contended cases at several worker counts instead (for a machine
                  with many cores; default JSON results-scaling.json)
  --workers LIST  worker counts for --scaling, comma-separated (default 1,2,4,8,16)
  --faults        run the fault scenarios instead (faults/postgres-*, then faults/tonic-*;
                  about two and a half minutes; default JSON faults.json)
  --record        after a full run of every case, publish it: bench/results/results.json
                  (with the commit measured) and the figures generated from it in README.md,
                  docs/benchmarks.md and docs/images/ratios.svg
  --render        regenerate those figures from bench/results/results.json (no run)
  --check-rendered  fail if those figures are not what bench/results/results.json says (CI)
  -h, --help      this message";

struct Args {
    settings: Settings,
    mode: &'static str,
    json: PathBuf,
    svg: PathBuf,
    only: Option<String>,
    scaling: Option<Vec<usize>>,
    faults: bool,
    /// `--record`, `--render` or `--check-rendered`.
    publish: Option<&'static str>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args {
        settings: Settings::full(),
        mode: "full",
        json: default_dir().join("results.json"),
        svg: default_dir().join("ratios.svg"),
        only: None,
        scaling: None,
        faults: false,
        publish: None,
    };
    let mut json_given = false;
    let mut repeats: Option<usize> = None;
    let mut workers: Option<Vec<usize>> = None;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--quick" => (parsed.settings, parsed.mode) = (Settings::quick(), "quick"),
            "--smoke" => (parsed.settings, parsed.mode) = (Settings::smoke(), "smoke"),
            "--json" => {
                parsed.json = PathBuf::from(value("--json")?);
                json_given = true;
            }
            "--repeats" => match value("--repeats")?.parse::<usize>() {
                Ok(n) if n > 0 => repeats = Some(n),
                _ => return Err("--repeats needs a whole number of at least 1".into()),
            },
            "--scaling" => parsed.scaling = Some(scaling::WORKERS.to_vec()),
            "--faults" => parsed.faults = true,
            "--record" => parsed.publish = Some("record"),
            "--render" => parsed.publish = Some("render"),
            "--check-rendered" => parsed.publish = Some("check"),
            "--workers" => workers = Some(worker_list(&value("--workers")?)?),
            "--svg" => parsed.svg = PathBuf::from(value("--svg")?),
            "--only" => parsed.only = Some(value("--only")?),
            // `cargo bench` passes `--bench` to every target; accept and ignore it.
            "--bench" => {}
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if let Some(n) = repeats {
        parsed.settings.repeats = n;
    }
    match (&mut parsed.scaling, workers) {
        (Some(list), Some(w)) => *list = w,
        (None, Some(_)) => return Err("--workers needs --scaling".into()),
        _ => {}
    }
    if parsed.publish == Some("record")
        && (parsed.mode != "full"
            || parsed.only.is_some()
            || parsed.scaling.is_some()
            || parsed.faults)
    {
        return Err("--record publishes a full run of every case: no --quick, --smoke, --only, --scaling or --faults".into());
    }
    if parsed.scaling.is_some() && parsed.faults {
        return Err("--scaling and --faults are separate runs".into());
    }
    if parsed.scaling.is_some() && !json_given {
        parsed.json = default_dir().join("results-scaling.json");
    }
    if parsed.faults && !json_given {
        parsed.json = default_dir().join("faults.json");
    }
    Ok(Some(parsed))
}

/// `1,2,4` → `[1, 2, 4]`; every count at least 1.
fn worker_list(list: &str) -> Result<Vec<usize>, String> {
    list.split(',')
        .map(|w| match w.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("--workers: `{w}` is not a worker count")),
        })
        .collect()
}

/// `target/slotpool-bench` of the workspace (wherever the binary is run from).
fn default_dir() -> PathBuf {
    let bench = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    bench
        .parent()
        .unwrap_or(bench)
        .join("target")
        .join("slotpool-bench")
}

/// Whether a group of cases named `group/...` can hold a case matching `only`.
fn group_wanted(only: Option<&str>, group: &str) -> bool {
    only.is_none_or(|p| group.starts_with(p) || p.starts_with(group))
}

/// `--faults`: every fault scenario `wanted` accepts, its table and JSON; fails when
/// slotpool's pool leaked.
fn run_faults(args: &Args, wanted: impl Fn(&str) -> bool) -> ExitCode {
    let timing = if args.mode == "full" {
        faults::Timing::full()
    } else {
        faults::Timing::quick()
    };
    println!(
        "slotpool-bench: faults, {} run ({:?} before each fault, {:?} after)",
        args.mode, timing.pre, timing.post
    );
    let started = std::time::Instant::now();
    let records = match faults::compare(&timing, wanted) {
        Ok(records) => records,
        Err(reason) => {
            println!("faults/*: skipped: {reason}");
            return ExitCode::SUCCESS;
        }
    };
    if records.is_empty() {
        eprintln!(
            "slotpool-bench: no fault case matches {:?}",
            args.only.as_deref().unwrap_or("")
        );
        return ExitCode::from(2);
    }
    print!("\n{}", faults::table(&records));
    println!("total {:.1} s", started.elapsed().as_secs_f64());
    if let Err(error) = faults::write_json(&args.json, &records) {
        eprintln!(
            "slotpool-bench: cannot write {}: {error}",
            args.json.display()
        );
        return ExitCode::FAILURE;
    }
    println!("results: {}", args.json.display());
    let leaks: Vec<&str> = records
        .iter()
        .filter(|r| r.impl_name == faults::Impl::Slotpool.name() && r.leaked > 0)
        .map(|r| r.case.as_str())
        .collect();
    if leaks.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "slotpool-bench: slotpool's pool leaked in {}",
            leaks.join(", ")
        );
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("slotpool-bench: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let only = args.only.as_deref();
    let wanted = |case: &str| only.is_none_or(|p| case.starts_with(p));
    match args.publish {
        Some("render") => return render(None),
        Some("check") => return check_rendered(),
        _ => {}
    }
    if args.faults {
        return run_faults(&args, wanted);
    }
    let settings = args.settings;
    println!(
        "slotpool-bench: {} run ({} repeats, ops scale {}), medians of interleaved repeats",
        args.mode, settings.repeats, settings.scale
    );
    let started = std::time::Instant::now();

    if let Some(workers) = &args.scaling {
        let records = scaling::compare(&settings, workers);
        print!(
            "\n{}\n{}",
            report::table(&records),
            report::scaling_summary(&records)
        );
        println!("total {:.1} s", started.elapsed().as_secs_f64());
        return match report::write_json(&args.json, &records) {
            Ok(()) => {
                println!("wrote {}", args.json.display());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!(
                    "slotpool-bench: cannot write {}: {error}",
                    args.json.display()
                );
                ExitCode::FAILURE
            }
        };
    }

    let mut records: Vec<Record> = Vec::new();
    let groups: [(&str, &[Case]); 6] = [
        ("stream/", stream::CASES),
        ("stream-depth1/", stream_depth1::CASES),
        ("keyed/", keyed::CASES),
        ("session/", session::CASES),
        ("client/", client::CASES),
        ("managed/", managed::CASES),
    ];
    for (group, cases) in groups {
        if group_wanted(only, group) {
            records.extend(run_cases(cases, &settings, wanted));
        }
    }
    if group_wanted(only, "e2e/") {
        records.extend(e2e::compare(&settings));
    }
    let mut skipped: Vec<(&str, String)> = Vec::new();
    if group_wanted(only, "postgres/") {
        match postgres::compare_only(&settings, wanted) {
            Ok(measured) => records.extend(measured),
            Err(reason) => {
                println!("postgres/*: skipped: {reason}");
                skipped.push(("postgres/*", reason));
            }
        }
    }
    records.retain(|r| wanted(&r.case));

    print!("\n{}", report::table(&records));
    for (cases, reason) in &skipped {
        println!("{cases}  skipped: {reason}");
    }
    println!("total {:.1} s", started.elapsed().as_secs_f64());

    if records.is_empty() && !skipped.is_empty() {
        return ExitCode::SUCCESS;
    }
    if records.is_empty() {
        eprintln!("slotpool-bench: no case matches {:?}", only.unwrap_or(""));
        return ExitCode::from(2);
    }
    if let Err(error) = report::write_json(&args.json, &records) {
        eprintln!(
            "slotpool-bench: cannot write {}: {error}",
            args.json.display()
        );
        return ExitCode::FAILURE;
    }
    let svg = report::ratios_svg(&records);
    let written = args
        .svg
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&args.svg, svg));
    if let Err(error) = written {
        eprintln!(
            "slotpool-bench: cannot write {}: {error}",
            args.svg.display()
        );
        return ExitCode::FAILURE;
    }
    print!("\n{}", report::summary(&records));
    println!(
        "results: {} (every record), {} (the chart)",
        args.json.display(),
        args.svg.display()
    );
    if args.publish == Some("record") {
        let root = publish::root();
        let published = publish::Published {
            commit: publish::commit(&root),
            date: today(),
            machine: machine(),
            mode: args.mode.to_string(),
            records,
        };
        return render(Some(published));
    }
    ExitCode::SUCCESS
}

/// `--record` (with the run to publish) and `--render`: writes the published run, if given,
/// and every figure generated from it.
fn render(record: Option<publish::Published>) -> ExitCode {
    let root = publish::root();
    let published = match record {
        Some(published) => {
            if let Err(error) = publish::write(&root, &published) {
                eprintln!("slotpool-bench: cannot write {}: {error}", publish::RESULTS);
                return ExitCode::FAILURE;
            }
            println!(
                "published: {} (commit {})",
                publish::RESULTS,
                published.commit
            );
            published
        }
        None => match publish::read(&root) {
            Ok(published) => published,
            Err(error) => {
                eprintln!("slotpool-bench: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    let files = match publish::rendered(&root, &published) {
        Ok(files) => files,
        Err(error) => {
            eprintln!("slotpool-bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    for (path, text) in files {
        if let Err(error) = std::fs::write(&path, text) {
            eprintln!("slotpool-bench: cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!("rendered: {}", path.display());
    }
    ExitCode::SUCCESS
}

/// `--check-rendered`: whether every generated figure is what the published run says.
fn check_rendered() -> ExitCode {
    let root = publish::root();
    let outcome = publish::read(&root).and_then(|published| publish::rendered(&root, &published));
    let files = match outcome {
        Ok(files) => files,
        Err(error) => {
            eprintln!("slotpool-bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    let stale: Vec<_> = files
        .iter()
        .filter(|(path, text)| std::fs::read_to_string(path).ok().as_deref() != Some(text))
        .map(|(path, _)| path.display().to_string())
        .collect();
    if stale.is_empty() {
        println!("the published figures agree with {}", publish::RESULTS);
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "slotpool-bench: not what {} says: {} (run `cargo run -p slotpool-bench -- --render`)",
        publish::RESULTS,
        stale.join(", ")
    );
    ExitCode::FAILURE
}

/// Today's date (UTC), from the system's `date`.
fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown date".into())
}

/// The machine, in words: its core count.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cores}-core machine")
}
