//! `creek bench paper`: the Creek paper's evaluation (§6) in the simulator.
//!
//! Every point is TPC-C at Figure 1's setting — 5 replicas × 16 cores,
//! 1 Gbps links with 0.2–0.3 ms one-way latency, no faults, open-loop
//! Poisson arrivals, weak transactions answered by one tentative view —
//! run by one of the four protocols (creek, archie, smr, bayou). A
//! *variation* is one of the paper's experiments: Figure 1 itself (`fig1`:
//! 5 warehouses, Payment strong) and the §6.3 ones (`wh1`, `wh20`,
//! `strong10`, `strong50`, `long5`). Each protocol sweeps its rates; then
//! creek and archie run once more at half of Creek's peak, where latencies
//! are compared (smr and bayou saturate far below it, so theirs are read at
//! their own sweep point nearest half of their own peak).
//!
//! The summary gives, per variation and protocol, the peak throughput, the
//! latencies at that half-peak point, accuracy, execution ratio, and the
//! issue's targets with a verdict each, beside what the paper reports. The
//! full run streams every point to `paper.jsonl` and writes
//! `paper-summary.json` and `paper.md`; `--quick` runs a reduced Figure 1
//! and only prints the summary. It is not a load generator for real
//! clusters: `creek bench tpcc --target cluster` is.
//!
//! The files: `variations.rs` (the experiments and the paper's numbers),
//! `run.rs` (validation and running points), `summary.rs` (peaks, the
//! half-peak point, the summary), `targets.rs` (the targets and their
//! verdicts), `report.rs` (`paper.md`).

mod report;
mod run;
mod summary;
mod targets;
#[cfg(test)]
mod testdata;
mod variations;

use std::fs;
use std::path::PathBuf;

use creek_exec::mvcc::Schedule;
use serde_json::Value as Json;

use report::{command_line, machine, markdown, utc_date, Header};
use run::{cannot_write, open_points_file, run_points, sweep_specs, validate, Point, Run, Sink};
use summary::{half_peak_specs, summary, variation_summary};

/// `creek bench paper`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PaperArgs {
    /// A reduced Figure 1 (fewer rates, 0.1 s warm-up and 0.3 s measured
    /// per point; a few minutes in release). Prints the summary; writes
    /// files only when `--out` is given.
    #[arg(long)]
    quick: bool,
    /// Print the summary as one JSON line (indented otherwise).
    #[arg(long)]
    json: bool,
    /// Directory for paper.jsonl, paper-summary.json and paper.md
    /// [default: docs/bench].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Variations to run, e.g. `fig1,wh1` (default: all): fig1, wh1, wh20,
    /// strong10, strong50, long5.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Points simulated at once (default: the available cores, at most 2;
    /// each point holds every replica's database, ~5 GB at 5 warehouses;
    /// wh20 always runs one at a time).
    #[arg(long)]
    jobs: Option<usize>,
    /// Seed of every simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Protocols to run, e.g. `creek,archie` (default: all four). The
    /// half-peak points need creek among them.
    #[arg(long, value_delimiter = ',', value_parser = creek_sim::config::Protocol::parse)]
    protocols: Vec<creek_sim::config::Protocol>,
    /// Rates to sweep, tx/s, e.g. `30000,35000` (default: each variation's
    /// own, by protocol). Every protocol run sweeps these.
    #[arg(long, value_delimiter = ',')]
    rates: Vec<f64>,
    /// How the multiversion executor (creek's and archie's) picks its next
    /// execution: `both` (fresh ops first, reruns held behind the running
    /// writer they conflicted with; the server's default, and what
    /// docs/bench/paper.md was measured with), `lowest-first`,
    /// `fresh-first`, `held-reruns`.
    #[arg(long, default_value = "both", value_parser = parse_schedule)]
    schedule: Schedule,
    /// Simulate nothing: recompute paper-summary.json and paper.md from the
    /// points in `<out>/paper.jsonl` (after writing paper-notes.md, or after
    /// appending the points of another run, e.g. `--only wh20` run apart
    /// for its memory).
    #[arg(long)]
    report_only: bool,
    /// A tiny setting for tests (the simulator's small TPC-C database, three
    /// rates, 50 ms points); its numbers mean nothing.
    #[arg(long, hide = true)]
    tiny: bool,
}

/// A `--schedule` name.
fn parse_schedule(name: &str) -> Result<Schedule, String> {
    Schedule::parse(name)
}

/// The `--schedule` name of `s`.
pub(super) fn schedule_name(s: Schedule) -> &'static str {
    s.name()
}

/// Run `creek bench paper`.
pub fn paper(args: &PaperArgs) -> Result<(), String> {
    let (summary, failed) = execute(args)?;
    crate::print_report(&summary, args.json)?;
    if failed {
        return Err("a point's consistency check failed (consistency_ok: false)".into());
    }
    Ok(())
}

/// Run the evaluation; the summary, and whether a point's consistency
/// check failed.
fn execute(args: &PaperArgs) -> Result<(Json, bool), String> {
    let run = validate(args)?;
    if args.report_only {
        return report_only(run);
    }
    let jsonl = match &run.out {
        Some(dir) => Some(open_points_file(dir)?),
        None => None,
    };
    let sweep_points: usize = run
        .variations
        .iter()
        .map(|v| sweep_specs(&run, v).len())
        .sum();
    eprintln!(
        "paper: {} run of {} ({} sweep points, then up to 2 at half of creek's peak each), {} job(s){}",
        run.mode.name(),
        run.variations
            .iter()
            .map(|v| v.label)
            .collect::<Vec<_>>()
            .join(", "),
        sweep_points,
        run.jobs,
        run.out
            .as_ref()
            .map(|d| format!(", points to {}", d.join("paper.jsonl").display()))
            .unwrap_or_default()
    );
    let mut sink = Sink::new(jsonl);
    let mut done = Vec::new();
    for v in &run.variations {
        let mut points: Vec<Point> = Vec::new();
        let jobs = run.jobs.min(v.jobs_max);
        let sweep = sweep_specs(&run, v);
        run_points(&run, &sweep, jobs, &mut |spec, p| {
            sink.keep(spec, p, &mut points)
        })?;
        let extra = half_peak_specs(v, &run.protocols, &points);
        run_points(&run, &extra, jobs, &mut |spec, p| {
            sink.keep(spec, p, &mut points)
        })?;
        done.push((*v, variation_summary(&run, v, &points)));
    }
    let summary = summary(&done);
    if let Some(dir) = &run.out {
        write_files(dir, &summary, &done, command_line())?;
    }
    Ok((summary, sink.failed))
}

/// `--report-only`: the summary and paper.md of the points already in
/// `<out>/paper.jsonl`, by variation in the paper's order.
fn report_only(run: Run) -> Result<(Json, bool), String> {
    let dir = run
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("docs/bench"));
    let path = dir.join("paper.jsonl");
    let text =
        fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut points: Vec<Point> = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let p: Point = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: not a point: {e}", path.display(), n + 1))?;
        points.push(p);
    }
    let failed = points
        .iter()
        .any(|p| p.get("consistency_ok") == Some(&Json::Bool(false)));
    let mut done = Vec::new();
    let mut labels = Vec::new();
    for v in &run.variations {
        let mine: Vec<Point> = points
            .iter()
            .filter(|p| p.get("label").and_then(Json::as_str) == Some(v.label))
            .cloned()
            .collect();
        if !mine.is_empty() {
            labels.push(v.label);
            done.push((*v, variation_summary(&run, v, &mine)));
        }
    }
    if done.is_empty() {
        return Err(format!(
            "{} holds no point of these variations",
            path.display()
        ));
    }
    let summary = summary(&done);
    let command = format!(
        "creek bench paper --only {} (paper.md re-rendered from paper.jsonl by --report-only)",
        labels.join(",")
    );
    write_files(&dir, &summary, &done, command)?;
    Ok((summary, failed))
}

/// Write paper-summary.json and paper.md (with paper-notes.md) into `dir`.
fn write_files(
    dir: &std::path::Path,
    summary: &Json,
    done: &[(variations::Variation, Json)],
    command: String,
) -> Result<(), String> {
    {
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            fs::write(&path, text).map_err(|e| cannot_write(&path, &e))
        };
        let pretty = serde_json::to_string_pretty(summary).map_err(|e| e.to_string())?;
        write("paper-summary.json", &(pretty + "\n"))?;
        let notes = fs::read_to_string(dir.join("paper-notes.md")).ok();
        let header = Header {
            date: utc_date(),
            machine: machine(),
            command,
            notes,
        };
        write("paper.md", &markdown(&header, done))?;
        eprintln!(
            "paper: wrote {} (paper-summary.json, paper.md)",
            dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use creek_sim::config::Protocol;

    use super::variations::{PROTOCOLS, VARIATIONS};
    use super::*;

    #[test]
    fn bad_input_fails_before_anything_runs() {
        let args = |f: &dyn Fn(&mut PaperArgs)| {
            let mut a = PaperArgs {
                tiny: true,
                ..PaperArgs::default()
            };
            f(&mut a);
            a
        };
        let err = execute(&args(&|a| a.only = vec!["nope".into()])).expect_err("unknown");
        assert!(err.contains("nope"), "{err}");
        let err = execute(&args(&|a| a.jobs = Some(0))).expect_err("no jobs");
        assert!(err.contains("--jobs"), "{err}");
        let err = execute(&PaperArgs {
            quick: true,
            only: vec!["wh1".into()],
            ..PaperArgs::default()
        })
        .expect_err("quick is fig1 only");
        assert!(err.contains("fig1"), "{err}");
        // A regular file where the directory should be.
        let file = std::env::temp_dir().join(format!("creek-paper-file-{}", std::process::id()));
        fs::write(&file, "x").expect("temp file");
        let out = file.join("sub");
        let err = execute(&args(&|a| a.out = Some(out.clone()))).expect_err("unwritable");
        assert!(err.contains("cannot create --out"), "{err}");
        let _ = fs::remove_file(&file);
        let err = execute(&args(&|a| a.rates = vec![1000.0, 0.0])).expect_err("zero rate");
        assert!(err.contains("--rates"), "{err}");
        let err = parse_schedule("fastest").expect_err("unknown schedule");
        assert!(err.contains("lowest-first"), "{err}");
    }

    /// `--protocols` and `--rates` narrow the sweep; every schedule name
    /// parses back to itself.
    #[test]
    fn protocols_and_rates_narrow_the_sweep() {
        let args = PaperArgs {
            protocols: vec![Protocol::Archie, Protocol::Creek],
            rates: vec![1000.0, 3000.0],
            ..PaperArgs::default()
        };
        let run = validate(&args).expect("valid");
        let specs = sweep_specs(&run, &VARIATIONS[0]);
        let got: Vec<(&str, f64)> = specs.iter().map(|s| (s.protocol.name(), s.rate)).collect();
        assert_eq!(
            got,
            [
                ("creek", 1000.0),
                ("creek", 3000.0),
                ("archie", 1000.0),
                ("archie", 3000.0)
            ]
        );
        for (name, schedule) in Schedule::NAMED {
            assert_eq!(parse_schedule(name), Ok(schedule));
            assert_eq!(schedule_name(schedule), name);
        }
    }

    /// The whole command on the tiny setting: every point simulated,
    /// streamed and summarised, the files written.
    #[test]
    fn a_tiny_run_writes_points_summary_and_report() {
        let dir = std::env::temp_dir().join(format!("creek-paper-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("temp dir");
        fs::write(dir.join("paper-notes.md"), "Notes kept verbatim.\n").expect("notes");
        let args = PaperArgs {
            tiny: true,
            out: Some(dir.clone()),
            jobs: Some(2),
            ..PaperArgs::default()
        };
        let (summary, failed) = execute(&args).expect("the tiny run");
        assert!(!failed, "{summary}");
        for p in PROTOCOLS {
            let s = &summary["protocols"][p.name()];
            assert!(
                s["peak_throughput_ops_per_sec"]
                    .as_f64()
                    .is_some_and(|x| x > 0.0),
                "{p:?}: {s}"
            );
            assert!(s["points"].as_u64().is_some_and(|n| n >= 3), "{p:?}: {s}");
        }
        let lines = fs::read_to_string(dir.join("paper.jsonl")).expect("paper.jsonl");
        let points: Vec<Json> = lines
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        // Every variation (tiny runs them all on the small database), each
        // with 12 sweep points and up to 2 at half of creek's peak.
        assert!(points.len() >= 12 * VARIATIONS.len(), "{}", points.len());
        for v in VARIATIONS {
            let n = points
                .iter()
                .filter(|p| p["label"] == json!(v.label))
                .count();
            assert!((12..=14).contains(&n), "{}: {n} points", v.label);
            assert!(summary["variations"][v.label]["targets"]["creek_accuracy"].is_object());
        }
        assert_eq!(summary["setting"]["variation"], json!("fig1"));
        let written: Json = serde_json::from_str(
            &fs::read_to_string(dir.join("paper-summary.json")).expect("summary"),
        )
        .expect("summary is JSON");
        // (Floats may differ in the last bit through text.)
        assert_eq!(written["setting"], summary["setting"]);
        let keys = |j: &Json| j.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>());
        assert_eq!(keys(&written["variations"]), keys(&summary["variations"]));
        let md = fs::read_to_string(dir.join("paper.md")).expect("paper.md");
        assert!(md.contains("(paper: ~32.5k)") && md.contains("Notes kept verbatim."));
        // --report-only re-renders the same summary from paper.jsonl alone.
        fs::write(dir.join("paper-notes.md"), "Notes rewritten.\n").expect("notes");
        let (again, failed) = execute(&PaperArgs {
            report_only: true,
            ..args.clone()
        })
        .expect("report only");
        assert!(!failed);
        assert_eq!(keys(&again["variations"]), keys(&summary["variations"]));
        assert_eq!(
            again["protocols"]["creek"]["peak_throughput_ops_per_sec"],
            summary["protocols"]["creek"]["peak_throughput_ops_per_sec"]
        );
        let md = fs::read_to_string(dir.join("paper.md")).expect("paper.md");
        assert!(md.contains("Notes rewritten.") && md.contains("--report-only"));
        let _ = fs::remove_dir_all(&dir);
    }
}
