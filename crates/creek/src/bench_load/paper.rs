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

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use creek_sim::config::{default_costs_us, Protocol, SimConfig};
use creek_sim::workload::{self, WorkloadConfig};
use serde_json::{json, Map, Value as Json};

use super::sim::sim_point_for;

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
    /// A tiny setting for tests (the simulator's small TPC-C database, three
    /// rates, 50 ms points); its numbers mean nothing.
    #[arg(long, hide = true)]
    tiny: bool,
}

/// How much of the evaluation a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Full,
    Quick,
    Tiny,
}

const QUICK_FAST_RATES: &[f64] = &[15e3, 30e3, 40e3, 50e3];
const QUICK_SLOW_RATES: &[f64] = &[1e3, 2e3, 3e3, 4e3];
const TINY_RATES: &[f64] = &[250.0, 500.0, 1000.0];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Quick => "quick",
            Mode::Tiny => "tiny",
        }
    }

    fn warmup_us(self) -> u64 {
        match self {
            Mode::Full => 300_000,
            Mode::Quick => 100_000,
            Mode::Tiny => 20_000,
        }
    }

    fn duration_us(self) -> u64 {
        match self {
            Mode::Full => 1_000_000,
            Mode::Quick => 300_000,
            Mode::Tiny => 50_000,
        }
    }

    /// The rates `protocol` sweeps in `v`.
    fn rates(self, v: &Variation, protocol: Protocol) -> &'static [f64] {
        let fast = matches!(protocol, Protocol::Creek | Protocol::Archie);
        match (self, fast) {
            (Mode::Full, true) => v.fast_rates,
            (Mode::Full, false) => v.slow_rates,
            (Mode::Quick, true) => QUICK_FAST_RATES,
            (Mode::Quick, false) => QUICK_SLOW_RATES,
            (Mode::Tiny, _) => TINY_RATES,
        }
    }

    /// The TPC-C database: `v`'s warehouses, or the small one when tiny.
    fn warehouses(self, v: &Variation) -> Option<u16> {
        (self != Mode::Tiny).then_some(v.warehouses)
    }
}

/// The columns of every table, in the paper's order of interest.
const PROTOCOLS: [Protocol; 4] = [
    Protocol::Creek,
    Protocol::Archie,
    Protocol::Smr,
    Protocol::Bayou,
];

/// What the Creek paper reports for an experiment (§6), printed beside ours.
#[derive(Clone, Copy, Debug)]
struct Paper {
    /// Peak throughput, tx/s, per protocol in [`PROTOCOLS`] order.
    peak: [Option<f64>; 4],
    weak_tentative_ms: Option<&'static str>,
    strong_stable_ms: Option<&'static str>,
    /// Creek's weak tentative latency over Archie's response latency.
    weak_vs_archie: Option<&'static str>,
    /// Creek's strong stable latency over Archie's response latency.
    strong_vs_archie: Option<&'static str>,
    accuracy: Option<&'static str>,
    execution_ratio: Option<&'static str>,
}

const PAPER_GENERAL: Paper = Paper {
    peak: [None; 4],
    weak_tentative_ms: None,
    strong_stable_ms: None,
    weak_vs_archie: None,
    strong_vs_archie: None,
    accuracy: Some("0.98-1.00"),
    execution_ratio: Some("<= 1.1"),
};

/// One of the paper's experiments.
#[derive(Clone, Copy, Debug)]
struct Variation {
    label: &'static str,
    title: &'static str,
    warehouses: u16,
    /// `None`: Payment strong, the others weak.
    strong_share: Option<f64>,
    /// Every execution cost is multiplied by this.
    cost_factor: u64,
    /// Rates of creek and archie in a full run.
    fast_rates: &'static [f64],
    /// Rates of smr and bayou in a full run.
    slow_rates: &'static [f64],
    /// Most points at once (each holds every replica's database).
    jobs_max: usize,
    paper: Paper,
}

const FIG1_FAST: &[f64] = &[5e3, 10e3, 15e3, 20e3, 25e3, 30e3, 35e3, 40e3, 45e3];
const FIG1_SLOW: &[f64] = &[500.0, 1e3, 1.5e3, 2e3, 2.5e3, 3e3, 3.5e3];

const VARIATIONS: [Variation; 6] = [
    Variation {
        label: "fig1",
        title: "Figure 1: 5 warehouses, Payment strong",
        warehouses: 5,
        strong_share: None,
        cost_factor: 1,
        fast_rates: FIG1_FAST,
        slow_rates: FIG1_SLOW,
        jobs_max: usize::MAX,
        paper: Paper {
            peak: [Some(32_500.0), Some(35_000.0), Some(2_700.0), Some(2_700.0)],
            weak_tentative_ms: Some("~0.5"),
            strong_stable_ms: Some("0.8-1.2"),
            weak_vs_archie: Some("0.37-0.61"),
            strong_vs_archie: Some("0.75-0.85"),
            ..PAPER_GENERAL
        },
    },
    Variation {
        label: "wh1",
        title: "1 warehouse (§6.3)",
        warehouses: 1,
        strong_share: None,
        cost_factor: 1,
        fast_rates: &[2e3, 4e3, 6e3, 8e3, 10e3, 12e3, 14e3],
        slow_rates: &[1e3, 2e3, 3e3, 3.5e3],
        jobs_max: usize::MAX,
        paper: Paper {
            peak: [Some(11_000.0), Some(11_000.0), None, None],
            accuracy: Some("0.92-1.00"),
            execution_ratio: Some("~1.8"),
            ..PAPER_GENERAL
        },
    },
    Variation {
        label: "wh20",
        title: "20 warehouses (§6.3)",
        warehouses: 20,
        strong_share: None,
        cost_factor: 1,
        fast_rates: &[10e3, 20e3, 30e3, 40e3, 45e3],
        slow_rates: &[1e3, 2e3, 3e3],
        // ~4x the memory of 5 warehouses.
        jobs_max: 1,
        paper: Paper {
            peak: [Some(40_000.0), Some(40_000.0), None, None],
            ..PAPER_GENERAL
        },
    },
    Variation {
        label: "strong10",
        title: "10% strong transactions, 5 warehouses (§6.3)",
        warehouses: 5,
        strong_share: Some(0.1),
        cost_factor: 1,
        fast_rates: FIG1_FAST,
        slow_rates: FIG1_SLOW,
        jobs_max: usize::MAX,
        paper: PAPER_GENERAL,
    },
    Variation {
        label: "strong50",
        title: "50% strong transactions, 5 warehouses (§6.3)",
        warehouses: 5,
        strong_share: Some(0.5),
        cost_factor: 1,
        fast_rates: FIG1_FAST,
        slow_rates: FIG1_SLOW,
        jobs_max: usize::MAX,
        paper: PAPER_GENERAL,
    },
    Variation {
        label: "long5",
        title: "5x longer transactions, 5 warehouses (§6.3)",
        warehouses: 5,
        strong_share: None,
        cost_factor: 5,
        fast_rates: &[1e3, 2e3, 3e3, 4e3, 5e3, 6e3, 7e3, 8e3, 9e3],
        slow_rates: &[100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0],
        jobs_max: usize::MAX,
        // "The maximum throughput of all systems divided by 5."
        paper: Paper {
            peak: [Some(6_500.0), Some(7_000.0), Some(540.0), Some(540.0)],
            ..PAPER_GENERAL
        },
    },
];

/// The variations `--only` names (all when empty), in the paper's order.
fn select(only: &[String]) -> Result<Vec<Variation>, String> {
    for name in only {
        if !VARIATIONS.iter().any(|v| v.label == name.trim()) {
            let names: Vec<&str> = VARIATIONS.iter().map(|v| v.label).collect();
            return Err(format!(
                "unknown variation {name:?} in --only; one of {}",
                names.join(", ")
            ));
        }
    }
    Ok(VARIATIONS
        .iter()
        .filter(|v| only.is_empty() || only.iter().any(|n| n.trim() == v.label))
        .copied()
        .collect())
}

/// A validated run.
struct Run {
    mode: Mode,
    seed: u64,
    jobs: usize,
    variations: Vec<Variation>,
    /// Where files go, if anywhere.
    out: Option<PathBuf>,
}

fn validate(args: &PaperArgs) -> Result<Run, String> {
    let mode = match (args.tiny, args.quick) {
        (true, _) => Mode::Tiny,
        (false, true) => Mode::Quick,
        (false, false) => Mode::Full,
    };
    let mut variations = select(&args.only)?;
    if mode == Mode::Quick {
        if !args.only.is_empty() && variations.iter().any(|v| v.label != "fig1") {
            return Err("--quick runs fig1 only; leave out --only or say --only fig1".into());
        }
        variations.retain(|v| v.label == "fig1");
    }
    let jobs = match args.jobs {
        Some(0) => return Err("--jobs must be positive".into()),
        Some(j) => j,
        None => std::thread::available_parallelism().map_or(1, |n| n.get().min(2)),
    };
    let out = match (&args.out, mode) {
        (Some(dir), _) => Some(dir.clone()),
        (None, Mode::Full) => Some(PathBuf::from("docs/bench")),
        (None, _) => None,
    };
    Ok(Run {
        mode,
        seed: args.seed,
        jobs,
        variations,
        out,
    })
}

/// A measured point: its settings and measurements, as in `paper.jsonl`.
type Point = Map<String, Json>;

/// Where [`run_points`] hands each finished point.
type Done<'a> = &'a mut dyn FnMut(&Spec, Point) -> Result<(), String>;

/// One point to simulate.
#[derive(Clone, Copy, Debug)]
struct Spec {
    variation: Variation,
    protocol: Protocol,
    rate: f64,
    /// The extra point at half of Creek's peak (else a sweep point).
    half_peak: bool,
}

/// The simulation of a point: the paper's setting.
fn sim_config(run: &Run, spec: &Spec) -> SimConfig {
    let factor = spec.variation.cost_factor;
    let mut cost_us = default_costs_us();
    for c in cost_us.values_mut() {
        *c *= factor;
    }
    let defaults = SimConfig::default();
    SimConfig {
        protocol: spec.protocol,
        replicas: 5,
        cores: 16,
        seed: run.seed,
        workload: "tpcc".into(),
        duration_us: run.mode.warmup_us() + run.mode.duration_us(),
        warmup_us: run.mode.warmup_us(),
        clients: 0,
        think_us: 0,
        weak_answer_on_preliminary: true,
        open_rate_per_sec: spec.rate,
        latency_us: (200, 300),
        cost_us,
        default_cost_us: defaults.default_cost_us * factor,
        ..defaults
    }
}

/// The workload of a point: weak transactions get one tentative response
/// (`final_share` 0), the database bulk-loaded as `creek bench tpcc` does.
fn workload_config(run: &Run, v: &Variation) -> WorkloadConfig {
    WorkloadConfig {
        tpcc_warehouses: run.mode.warehouses(v),
        tpcc_strong_share: v.strong_share,
        final_share: 0.0,
        preload: true,
        ..WorkloadConfig::default()
    }
}

fn strong_share_json(v: &Variation) -> Json {
    v.strong_share.map_or(json!("payment"), |s| json!(s))
}

/// The settings in front of a point's measurements.
fn point_header(run: &Run, spec: &Spec, cfg: &SimConfig) -> Point {
    let v = &spec.variation;
    let mut m = Map::new();
    m.insert("bench".into(), json!("tpcc"));
    m.insert("target".into(), json!("sim"));
    m.insert("protocol".into(), json!(spec.protocol.name()));
    m.insert("label".into(), json!(v.label));
    m.insert(
        "point".into(),
        json!(if spec.half_peak { "half_peak" } else { "sweep" }),
    );
    m.insert("run".into(), json!(run.mode.name()));
    m.insert("replicas".into(), json!(cfg.replicas));
    m.insert("cores".into(), json!(cfg.cores));
    m.insert(
        "link_us".into(),
        json!([cfg.latency_us.0, cfg.latency_us.1]),
    );
    m.insert("bandwidth_bps".into(), json!(cfg.bandwidth_bps));
    m.insert("warehouses".into(), json!(run.mode.warehouses(v)));
    m.insert("strong_share".into(), strong_share_json(v));
    m.insert("cost_factor".into(), json!(v.cost_factor));
    m.insert("mode".into(), json!("open"));
    m.insert("offered_rate".into(), json!(spec.rate));
    m.insert("clients".into(), json!(null));
    m.insert("warmup_s".into(), json!(cfg.warmup_us as f64 / 1e6));
    m.insert(
        "duration_s".into(),
        json!((cfg.duration_us - cfg.warmup_us) as f64 / 1e6),
    );
    m.insert("seed".into(), json!(cfg.seed));
    m
}

/// Simulate one point (in the calling thread).
fn run_point(run: &Run, spec: &Spec) -> Result<Point, String> {
    let cfg = sim_config(run, spec);
    let mut point = point_header(run, spec, &cfg);
    let wl = workload_config(run, &spec.variation);
    point.extend(sim_point_for(
        cfg,
        || workload::by_name("tpcc", &wl),
        |_, _| {},
    )?);
    Ok(point)
}

/// Run `specs` on up to `jobs` worker threads, handing each finished point
/// to `done` in this thread as it comes. After an error no new point
/// starts, and the first error is returned.
fn run_points(run: &Run, specs: &[Spec], jobs: usize, done: Done<'_>) -> Result<(), String> {
    let next = &AtomicUsize::new(0);
    let stop = &AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..jobs.min(specs.len()) {
            let tx = tx.clone();
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(spec) = specs.get(i) else { break };
                    let point = run_point(run, spec);
                    if point.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if tx.send((i, point)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut first_error = None;
        for (i, point) in rx {
            if let Err(e) = point.and_then(|p| done(&specs[i], p)) {
                stop.store(true, Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

fn num(p: &Point, key: &str) -> Option<f64> {
    p.get(key).and_then(Json::as_f64)
}

fn of(points: &[Point], protocol: Protocol) -> impl Iterator<Item = &Point> {
    points
        .iter()
        .filter(move |p| p.get("protocol").and_then(Json::as_str) == Some(protocol.name()))
}

fn is_sweep(p: &Point) -> bool {
    p.get("point").and_then(Json::as_str) != Some("half_peak")
}

/// The sweep point of `protocol` with the highest measured throughput
/// (the lower rate on a tie).
fn peak_point(points: &[Point], protocol: Protocol) -> Option<&Point> {
    of(points, protocol)
        .filter(|p| is_sweep(p) && num(p, "throughput_ops_per_sec").is_some())
        .fold(None, |best: Option<&Point>, p| match best {
            Some(b) if num(b, "throughput_ops_per_sec") >= num(p, "throughput_ops_per_sec") => {
                Some(b)
            }
            _ => Some(p),
        })
}

/// Half of Creek's peak throughput, a whole rate; `None` without one.
fn creek_half_peak(points: &[Point]) -> Option<f64> {
    let peak = num(
        peak_point(points, Protocol::Creek)?,
        "throughput_ops_per_sec",
    )?;
    let half = (peak / 2.0).round();
    (half > 0.0).then_some(half)
}

/// The extra points of a variation after its sweep: creek and archie at
/// half of Creek's peak, unless a sweep point has exactly that rate.
fn half_peak_specs(v: &Variation, points: &[Point]) -> Vec<Spec> {
    let Some(half) = creek_half_peak(points) else {
        return Vec::new();
    };
    [Protocol::Creek, Protocol::Archie]
        .into_iter()
        .filter(|&p| !of(points, p).any(|pt| num(pt, "offered_rate") == Some(half)))
        .map(|protocol| Spec {
            variation: *v,
            protocol,
            rate: half,
            half_peak: true,
        })
        .collect()
}

/// Where `protocol`'s latencies are read, and how that rate was chosen:
/// creek and archie at half of Creek's peak; smr and bayou at their own
/// sweep point nearest half of their own peak.
fn latency_point(points: &[Point], protocol: Protocol) -> Option<(&Point, String)> {
    match protocol {
        Protocol::Creek | Protocol::Archie => {
            let half = creek_half_peak(points)?;
            let p = of(points, protocol).find(|p| num(p, "offered_rate") == Some(half))?;
            Some((p, "half of creek's peak".into()))
        }
        Protocol::Smr | Protocol::Bayou => {
            let own = num(peak_point(points, protocol)?, "throughput_ops_per_sec")?;
            let target = own / 2.0;
            let distance =
                |p: &Point| num(p, "offered_rate").map_or(f64::MAX, |r| (r - target).abs());
            let p = of(points, protocol).filter(|p| is_sweep(p)).fold(
                None,
                |best: Option<&Point>, p| match best {
                    Some(b) if distance(b) <= distance(p) => Some(b),
                    _ => Some(p),
                },
            )?;
            let below = match creek_half_peak(points) {
                Some(h) if own < h => " (its peak is below half of creek's peak)",
                _ => "",
            };
            Some((
                p,
                format!("its sweep point nearest half of its own peak{below}"),
            ))
        }
    }
}

/// The latency series a protocol is judged by: Creek's two views, the
/// others' one response.
fn judged_series(protocol: Protocol) -> &'static [&'static str] {
    match protocol {
        Protocol::Creek => &["weak_tentative", "strong_stable"],
        _ => &["response"],
    }
}

/// One protocol's line of a variation's summary.
fn protocol_summary(points: &[Point], protocol: Protocol) -> Json {
    let all: Vec<&Point> = of(points, protocol).collect();
    let sweep_max = all
        .iter()
        .filter(|p| is_sweep(p))
        .filter_map(|p| num(p, "offered_rate"))
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    let peak = peak_point(points, protocol);
    let peak_rate = peak.and_then(|p| num(p, "offered_rate"));
    let mut s = Map::new();
    s.insert(
        "peak_throughput_ops_per_sec".into(),
        json!(peak.and_then(|p| num(p, "throughput_ops_per_sec"))),
    );
    s.insert("peak_at_rate".into(), json!(peak_rate));
    s.insert(
        "peak_at_highest_rate".into(),
        json!(peak_rate.is_some() && peak_rate == sweep_max),
    );
    let at = latency_point(points, protocol);
    let get = |key: &str| at.as_ref().and_then(|(p, _)| p.get(key).cloned());
    s.insert(
        "latency_at_rate".into(),
        json!(at.as_ref().and_then(|(p, _)| num(p, "offered_rate"))),
    );
    s.insert(
        "latency_at".into(),
        json!(at.as_ref().map(|(_, why)| why.clone())),
    );
    let mut latency = Map::new();
    for series in judged_series(protocol) {
        let l = get("latency_us").and_then(|l| l.get(*series).cloned());
        latency.insert((*series).into(), l.unwrap_or(Json::Null));
    }
    s.insert("latency_us".into(), Json::Object(latency));
    s.insert(
        "throughput_at_latency_point".into(),
        get("throughput_ops_per_sec").unwrap_or(Json::Null),
    );
    for key in ["accuracy", "execution_ratio", "cpu_busy"] {
        s.insert(key.into(), get(key).unwrap_or(Json::Null));
    }
    s.insert(
        "bytes_per_op".into(),
        json!(get("bytes").and_then(|b| b.get("per_op").and_then(Json::as_f64))),
    );
    let values = |key: &'static str| all.iter().filter_map(move |p| num(p, key));
    s.insert(
        "accuracy_min".into(),
        json!(values("accuracy").reduce(f64::min)),
    );
    s.insert(
        "execution_ratio_max".into(),
        json!(values("execution_ratio").reduce(f64::max)),
    );
    let ok = |key: &str| all.iter().all(|p| p.get(key) == Some(&json!(true)));
    s.insert(
        "consistency_ok".into(),
        json!(!all.is_empty() && ok("consistency_ok")),
    );
    s.insert("settled".into(), json!(!all.is_empty() && ok("settled")));
    s.insert("points".into(), json!(all.len()));
    Json::Object(s)
}

/// The targets' names, in the order they are shown.
const TARGETS: [&str; 6] = [
    "creek_peak_vs_archie",
    "creek_peak_vs_smr",
    "weak_tentative_vs_archie",
    "strong_stable_vs_archie",
    "creek_accuracy",
    "creek_execution_ratio",
];

/// A threshold a measured value is held to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

impl Bound {
    fn holds(self, x: f64) -> bool {
        match self {
            Bound::AtLeast(t) => x >= t,
            Bound::AtMost(t) => x <= t,
        }
    }

    fn show(self) -> String {
        match self {
            Bound::AtLeast(t) => format!(">= {t}"),
            Bound::AtMost(t) => format!("<= {t}"),
        }
    }
}

fn verdict(what: &str, value: Option<f64>, bound: Bound) -> Json {
    json!({
        "what": what,
        "value": value,
        "threshold": bound.show(),
        "met": value.is_some_and(|x| bound.holds(x)),
    })
}

/// The targets for a variation, from its protocol summaries:
/// ratios only where both protocols have data; accuracy and execution
/// ratio (Creek's, at the half-peak point) always, unmet when missing.
fn targets(v: &Variation, protocols: &Map<String, Json>) -> Json {
    let at = |p: Protocol, path: &[&str]| {
        path.iter()
            .try_fold(protocols.get(p.name())?, |j, k| j.get(*k))
            .and_then(Json::as_f64)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let peak = |p| at(p, &["peak_throughput_ops_per_sec"]);
    let mean = |p, series| at(p, &["latency_us", series, "mean"]);
    let archie_response = mean(Protocol::Archie, "response");
    let mut t = Map::new();
    let ratios = [
        (
            "creek_peak_vs_archie",
            "creek's peak / archie's peak",
            ratio(peak(Protocol::Creek), peak(Protocol::Archie)),
            Bound::AtLeast(1.0),
        ),
        (
            "creek_peak_vs_smr",
            "creek's peak / smr's peak",
            ratio(peak(Protocol::Creek), peak(Protocol::Smr)),
            Bound::AtLeast(10.0),
        ),
        (
            "weak_tentative_vs_archie",
            "creek's weak tentative / archie's response, means at half of creek's peak",
            ratio(mean(Protocol::Creek, "weak_tentative"), archie_response),
            Bound::AtMost(0.4),
        ),
        (
            "strong_stable_vs_archie",
            "creek's strong stable / archie's response, means at half of creek's peak",
            ratio(mean(Protocol::Creek, "strong_stable"), archie_response),
            Bound::AtMost(0.8),
        ),
    ];
    for (name, what, value, bound) in ratios {
        if value.is_some() {
            t.insert(name.into(), verdict(what, value, bound));
        }
    }
    let one = v.warehouses == 1;
    t.insert(
        "creek_accuracy".into(),
        verdict(
            "creek's accuracy at half of its peak",
            at(Protocol::Creek, &["accuracy"]),
            Bound::AtLeast(if one { 0.95 } else { 0.99 }),
        ),
    );
    t.insert(
        "creek_execution_ratio".into(),
        verdict(
            "creek's execution ratio at half of its peak",
            at(Protocol::Creek, &["execution_ratio"]),
            Bound::AtMost(if one { 1.5 } else { 1.05 }),
        ),
    );
    Json::Object(t)
}

fn paper_json(paper: &Paper) -> Json {
    let mut peak = Map::new();
    for (p, x) in PROTOCOLS.iter().zip(paper.peak) {
        peak.insert(p.name().into(), json!(x));
    }
    json!({
        "source": "Creek paper, section 6",
        "peak_throughput_ops_per_sec": peak,
        "creek_weak_tentative_ms": paper.weak_tentative_ms,
        "creek_strong_stable_ms": paper.strong_stable_ms,
        "weak_tentative_vs_archie": paper.weak_vs_archie,
        "strong_stable_vs_archie": paper.strong_vs_archie,
        "creek_accuracy": paper.accuracy,
        "creek_execution_ratio": paper.execution_ratio,
    })
}

/// The setting of a variation as run.
fn setting_json(run: &Run, v: &Variation) -> Json {
    let mut rates = Map::new();
    for p in PROTOCOLS {
        rates.insert(p.name().into(), json!(run.mode.rates(v, p)));
    }
    json!({
        "variation": v.label,
        "title": v.title,
        "run": run.mode.name(),
        "replicas": 5,
        "cores": 16,
        "link_us": [200, 300],
        "bandwidth_bps": SimConfig::default().bandwidth_bps,
        "faults": "none",
        "warehouses": run.mode.warehouses(v),
        "strong_share": strong_share_json(v),
        "cost_factor": v.cost_factor,
        "weak_views": "tentative only (final_share 0)",
        "warmup_s": run.mode.warmup_us() as f64 / 1e6,
        "duration_s": run.mode.duration_us() as f64 / 1e6,
        "seed": run.seed,
        "rates": rates,
    })
}

/// A variation's summary: `{setting, protocols, targets, paper}`.
fn variation_summary(run: &Run, v: &Variation, points: &[Point]) -> Json {
    let mut protocols = Map::new();
    for p in PROTOCOLS {
        protocols.insert(p.name().into(), protocol_summary(points, p));
    }
    json!({
        "setting": setting_json(run, v),
        "targets": targets(v, &protocols),
        "protocols": protocols,
        "paper": paper_json(&v.paper),
    })
}

/// The run's summary: the object of Figure 1's variation (or the first one
/// run), plus every variation's under `variations` when more than one ran.
fn summary(done: &[(Variation, Json)]) -> Json {
    let Some((_, primary)) = done
        .iter()
        .find(|(v, _)| v.label == "fig1")
        .or(done.first())
    else {
        return json!({});
    };
    let mut s = primary.clone();
    if done.len() > 1 {
        let all: Map<String, Json> = done
            .iter()
            .map(|(v, j)| (v.label.to_string(), j.clone()))
            .collect();
        if let Json::Object(m) = &mut s {
            m.insert("variations".into(), Json::Object(all));
        }
    }
    s
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
    let jsonl = match &run.out {
        Some(dir) => Some(open_points_file(dir)?),
        None => None,
    };
    let sweep_points: usize = run
        .variations
        .iter()
        .map(|v| {
            PROTOCOLS
                .iter()
                .map(|&p| run.mode.rates(v, p).len())
                .sum::<usize>()
        })
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
    let mut sink = Sink {
        jsonl,
        started: Instant::now(),
        finished: 0,
        failed: false,
    };
    let mut done = Vec::new();
    for v in &run.variations {
        let mut points: Vec<Point> = Vec::new();
        let jobs = run.jobs.min(v.jobs_max);
        let sweep: Vec<Spec> = PROTOCOLS
            .iter()
            .flat_map(|&protocol| {
                run.mode.rates(v, protocol).iter().map(move |&rate| Spec {
                    variation: *v,
                    protocol,
                    rate,
                    half_peak: false,
                })
            })
            .collect();
        run_points(&run, &sweep, jobs, &mut |spec, p| {
            sink.keep(spec, p, &mut points)
        })?;
        let extra = half_peak_specs(v, &points);
        run_points(&run, &extra, jobs, &mut |spec, p| {
            sink.keep(spec, p, &mut points)
        })?;
        done.push((*v, variation_summary(&run, v, &points)));
    }
    let summary = summary(&done);
    if let Some(dir) = &run.out {
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        let pretty = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
        write("paper-summary.json", &(pretty + "\n"))?;
        let notes = fs::read_to_string(dir.join("paper-notes.md")).ok();
        let header = Header {
            date: utc_date(),
            machine: machine(),
            command: command_line(),
            notes,
        };
        write("paper.md", &markdown(&header, &done))?;
        eprintln!(
            "paper: wrote {} (paper.jsonl, paper-summary.json, paper.md)",
            dir.display()
        );
    }
    Ok((summary, sink.failed))
}

/// What `paper.md` says around the numbers.
struct Header {
    /// UTC, `YYYY-MM-DD`.
    date: String,
    machine: String,
    /// The command as run.
    command: String,
    /// The text of `paper-notes.md`, shown under "Analysis".
    notes: Option<String>,
}

/// `32.1k` for thousands, else the whole number; `-` when missing.
fn show_rate(x: Option<f64>) -> String {
    match x {
        Some(x) if x >= 1_000.0 => format!("{:.1}k", x / 1e3),
        Some(x) => format!("{x:.0}"),
        None => "-".into(),
    }
}

fn show(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// A list of rates, `5.0k, 10.0k`.
fn rates_text(rates: &Json) -> String {
    rates.as_array().map_or("-".into(), |rs| {
        rs.iter()
            .map(|r| show_rate(r.as_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// `ours (paper: theirs)`, or just ours when the paper has no number.
fn beside(ours: String, paper: Option<String>) -> String {
    match paper {
        Some(p) => format!("{ours} (paper: {p})"),
        None => ours,
    }
}

fn field(j: &Json, path: &[&str]) -> Option<f64> {
    path.iter()
        .try_fold(j, |j, k| j.get(*k))
        .and_then(Json::as_f64)
}

fn mean_ms(summary: &Json, series: &str) -> Option<f64> {
    field(summary, &["latency_us", series, "mean"]).map(|us| us / 1e3)
}

fn consistency(summary: &Json) -> &'static str {
    if summary.get("consistency_ok") == Some(&json!(true)) {
        "ok"
    } else {
        "FAILED"
    }
}

/// The main table: metrics by protocol, ours beside the paper's.
fn main_table(out: &mut String, v: &Variation, s: &Json) {
    let proto = |p: Protocol| &s["protocols"][p.name()];
    let paper_peak = |i: usize| v.paper.peak[i].map(|x| format!("~{}", show_rate(Some(x))));
    let text = |t: Option<&str>| t.map(str::to_string);
    let creek_only = |p: Protocol, ours: String, paper: Option<&str>| {
        if p == Protocol::Creek {
            beside(ours, text(paper))
        } else {
            "-".into()
        }
    };
    let target = |name: &str| field(&s["targets"], &[name, "value"]);
    out.push_str("| | creek | archie | smr | bayou |\n|---|---|---|---|---|\n");
    let mut row = |name: &str, f: &dyn Fn(usize, Protocol) -> String| {
        let cells: Vec<String> = PROTOCOLS
            .iter()
            .enumerate()
            .map(|(i, &p)| f(i, p))
            .collect();
        out.push_str(&format!("| {name} | {} |\n", cells.join(" | ")));
    };
    row("peak throughput (tx/s)", &|i, p| {
        beside(
            show_rate(field(proto(p), &["peak_throughput_ops_per_sec"])),
            paper_peak(i),
        )
    });
    row("latencies read at (offered tx/s)", &|_, p| {
        show_rate(field(proto(p), &["latency_at_rate"]))
    });
    row("weak tentative, mean (ms)", &|_, p| {
        creek_only(
            p,
            show(mean_ms(proto(p), "weak_tentative"), 3),
            v.paper.weak_tentative_ms,
        )
    });
    row("strong stable, mean (ms)", &|_, p| {
        creek_only(
            p,
            show(mean_ms(proto(p), "strong_stable"), 3),
            v.paper.strong_stable_ms,
        )
    });
    row("response, mean (ms)", &|_, p| {
        if p == Protocol::Creek {
            "-".into()
        } else {
            show(mean_ms(proto(p), "response"), 3)
        }
    });
    row("weak tentative / archie's response", &|_, p| {
        creek_only(
            p,
            show(target("weak_tentative_vs_archie"), 2),
            v.paper.weak_vs_archie,
        )
    });
    row("strong stable / archie's response", &|_, p| {
        creek_only(
            p,
            show(target("strong_stable_vs_archie"), 2),
            v.paper.strong_vs_archie,
        )
    });
    // The paper reports Creek's accuracy and execution ratio only.
    let creek_paper = |p: Protocol, t: Option<&str>| text(t).filter(|_| p == Protocol::Creek);
    row("accuracy", &|_, p| {
        beside(
            show(field(proto(p), &["accuracy"]), 4),
            creek_paper(p, v.paper.accuracy),
        )
    });
    row("execution ratio", &|_, p| {
        beside(
            show(field(proto(p), &["execution_ratio"]), 3),
            creek_paper(p, v.paper.execution_ratio),
        )
    });
    row("CPU busy (%)", &|_, p| {
        show(field(proto(p), &["cpu_busy"]).map(|x| x * 100.0), 1)
    });
    row("bytes on the wire per op", &|_, p| {
        show(field(proto(p), &["bytes_per_op"]), 0)
    });
    row("consistency (all points)", &|_, p| {
        consistency(proto(p)).into()
    });
}

/// A variation's table: one row per protocol.
fn variation_table(out: &mut String, v: &Variation, s: &Json) {
    out.push_str(
        "| protocol | peak tx/s | latencies at (offered tx/s) | weak tentative ms | \
         strong stable ms | response ms | accuracy | execution ratio | consistency |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for (i, p) in PROTOCOLS.iter().enumerate() {
        let ps = &s["protocols"][p.name()];
        let peak = beside(
            show_rate(field(ps, &["peak_throughput_ops_per_sec"])),
            v.paper.peak[i].map(|x| format!("~{}", show_rate(Some(x)))),
        );
        let series = |name: &str| {
            if judged_series(*p).contains(&name) {
                show(mean_ms(ps, name), 3)
            } else {
                "-".into()
            }
        };
        out.push_str(&format!(
            "| {} | {peak} | {} | {} | {} | {} | {} | {} | {} |\n",
            p.name(),
            show_rate(field(ps, &["latency_at_rate"])),
            series("weak_tentative"),
            series("strong_stable"),
            series("response"),
            show(field(ps, &["accuracy"]), 4),
            show(field(ps, &["execution_ratio"]), 3),
            consistency(ps),
        ));
    }
}

/// `paper.md`: the main table (Figure 1's variation, or the first run),
/// the targets, a table and a figure per variation, and the notes.
fn markdown(h: &Header, done: &[(Variation, Json)]) -> String {
    let mut out = String::from("# The Creek paper's evaluation, in the simulator\n\n");
    out.push_str(&format!(
        "Written by `creek bench paper` on {} (UTC). Machine: {}. Command:\n\n    {}\n\n",
        h.date, h.machine, h.command
    ));
    let Some((v, s)) = done
        .iter()
        .find(|(v, _)| v.label == "fig1")
        .or(done.first())
    else {
        out.push_str("No variation was run.\n");
        return out;
    };
    let st = &s["setting"];
    out.push_str(&format!(
        "Every point: TPC-C in the deterministic simulator, 5 replicas x 16 cores, \
         1 Gbps links with 0.2-0.3 ms one-way latency, no faults, open-loop Poisson \
         arrivals at random replicas, weak transactions answered by one tentative \
         view; {} s of warm-up then {} s measured (virtual time), seed {} ({} run). \
         Each point is a line of `paper.jsonl`; `paper-summary.json` is the summary \
         below as JSON. Latencies are means, read for creek and archie at half of \
         creek's peak throughput, and for smr and bayou (which saturate far below \
         it) at their own sweep point nearest half of their own peak. \"paper\" is \
         what the Creek paper reports (§6) for its own implementation.\n\n",
        show(field(st, &["warmup_s"]), 2),
        show(field(st, &["duration_s"]), 2),
        st["seed"],
        st["run"].as_str().unwrap_or("?"),
    ));
    out.push_str(&format!("## {}\n\n", v.title));
    main_table(&mut out, v, s);
    out.push_str(&format!("\n![{}](paper-{}.png)\n\n", v.title, v.label));
    out.push_str(
        "## Targets\n\n| variation | target | ours | threshold | |\n|---|---|---|---|---|\n",
    );
    for (v, s) in done {
        if let Some(targets) = s["targets"].as_object() {
            for t in TARGETS.iter().filter_map(|name| targets.get(*name)) {
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} |\n",
                    v.label,
                    t["what"].as_str().unwrap_or("?"),
                    show(t["value"].as_f64(), 3),
                    t["threshold"].as_str().unwrap_or("?"),
                    if t["met"] == json!(true) {
                        "met"
                    } else {
                        "missed"
                    },
                ));
            }
        }
    }
    out.push_str("\n## Variations\n");
    for (v, s) in done {
        let st = &s["setting"];
        let warehouses = st["warehouses"]
            .as_u64()
            .map_or("The small test database".into(), |w| {
                format!("{w} warehouse(s)")
            });
        let strong = st["strong_share"]
            .as_f64()
            .map_or("Payment strong, the others weak".into(), |x| {
                format!("{:.0}% of transactions strong", x * 100.0)
            });
        out.push_str(&format!(
            "\n### {}: {}\n\n{warehouses}, {strong}, execution costs x{}. Offered \
             rates (tx/s): creek and archie {}; smr and bayou {}.\n\n",
            v.label,
            v.title,
            v.cost_factor,
            rates_text(&st["rates"]["creek"]),
            rates_text(&st["rates"]["smr"]),
        ));
        variation_table(&mut out, v, s);
        out.push_str(&format!("\n![{}](paper-{}.png)\n", v.title, v.label));
    }
    if let Some(notes) = &h.notes {
        out.push_str("\n## Analysis\n\n");
        out.push_str(notes);
        if !notes.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// Where finished points go: a progress line, `paper.jsonl`, the
/// variation's list.
struct Sink {
    jsonl: Option<(File, PathBuf)>,
    started: Instant,
    finished: usize,
    /// Whether a point's consistency check failed.
    failed: bool,
}

impl Sink {
    fn keep(&mut self, spec: &Spec, point: Point, points: &mut Vec<Point>) -> Result<(), String> {
        self.finished += 1;
        let ok = point.get("consistency_ok") == Some(&json!(true));
        self.failed |= !ok;
        eprintln!(
            "paper: {} {} at {} ops/s{}: {} ops/s measured{} [done: {}, {:.0} s]",
            spec.variation.label,
            spec.protocol.name(),
            spec.rate,
            if spec.half_peak {
                " (half of creek's peak)"
            } else {
                ""
            },
            num(&point, "throughput_ops_per_sec").unwrap_or(0.0),
            if ok { "" } else { ", CONSISTENCY CHECK FAILED" },
            self.finished,
            self.started.elapsed().as_secs_f64(),
        );
        if let Some((file, path)) = self.jsonl.as_mut() {
            writeln!(file, "{}", Json::Object(point.clone()))
                .and_then(|()| file.flush())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        points.push(point);
        Ok(())
    }
}

/// Create `dir` and truncate `dir/paper.jsonl`, before anything runs (an
/// unwritable directory fails here).
fn open_points_file(dir: &Path) -> Result<(File, PathBuf), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create --out {}: {e}", dir.display()))?;
    let path = dir.join("paper.jsonl");
    let file = File::create(&path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok((file, path))
}

/// Today's date in UTC, `YYYY-MM-DD`.
fn utc_date() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// CPU model, core count and memory, from /proc.
fn machine() -> String {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .filter_map(|l| l.strip_prefix("model name"))
        .find_map(|rest| rest.trim_start().strip_prefix(':'))
        .map_or("unknown CPU", str::trim);
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or("unknown memory".to_string(), |kib| {
            format!("{:.1} GiB RAM", kib / (1024.0 * 1024.0))
        });
    format!("{model}, {cores} cores, {mem_gib}")
}

/// The command line as run, arguments with spaces quoted.
fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("'{a}'")
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig1() -> Variation {
        VARIATIONS[0]
    }

    fn series(mean: f64) -> Json {
        json!({"p50": mean, "p90": mean, "p99": mean * 2.0, "max": mean * 3.0, "mean": mean, "count": 10})
    }

    /// A point as the simulator would give it, with made-up numbers.
    fn point(protocol: Protocol, rate: f64, throughput: f64, half_peak: bool) -> Point {
        let latency = json!({
            "weak_tentative": series(rate / 100.0),
            "weak_final": null,
            "strong_tentative": series(rate / 200.0),
            "strong_stable": series(rate / 50.0),
            "response": series(rate / 10.0),
        });
        let mut p = Map::new();
        p.insert("protocol".into(), json!(protocol.name()));
        p.insert("label".into(), json!("fig1"));
        p.insert(
            "point".into(),
            json!(if half_peak { "half_peak" } else { "sweep" }),
        );
        p.insert("offered_rate".into(), json!(rate));
        p.insert("throughput_ops_per_sec".into(), json!(throughput));
        p.insert("latency_us".into(), latency);
        p.insert("accuracy".into(), json!(0.995));
        p.insert("execution_ratio".into(), json!(1.02));
        p.insert("cpu_busy".into(), json!(0.5));
        p.insert(
            "bytes".into(),
            json!({"consensus": 1, "gossip": 2, "per_op": 300.0}),
        );
        p.insert("consistency_ok".into(), json!(true));
        p.insert("settled".into(), json!(true));
        p
    }

    /// Creek peaks at 25k (offered 30k, overloaded beyond); archie at
    /// 28k; smr and bayou at 2.7k.
    fn sweep() -> Vec<Point> {
        let mut v = vec![
            point(Protocol::Creek, 10e3, 9_900.0, false),
            point(Protocol::Creek, 20e3, 19_800.0, false),
            point(Protocol::Creek, 30e3, 25_000.0, false),
            point(Protocol::Creek, 40e3, 24_000.0, false),
            point(Protocol::Archie, 10e3, 9_950.0, false),
            point(Protocol::Archie, 30e3, 28_000.0, false),
        ];
        for p in [Protocol::Smr, Protocol::Bayou] {
            v.push(point(p, 1e3, 1_000.0, false));
            v.push(point(p, 2e3, 2_000.0, false));
            v.push(point(p, 3e3, 2_700.0, false));
            v.push(point(p, 3.5e3, 2_650.0, false));
        }
        v
    }

    fn run() -> Run {
        Run {
            mode: Mode::Full,
            seed: 1,
            jobs: 1,
            variations: vec![fig1()],
            out: None,
        }
    }

    #[test]
    fn peak_is_the_highest_measured_throughput_not_the_highest_rate() {
        let points = sweep();
        let peak = peak_point(&points, Protocol::Creek).expect("creek has points");
        assert_eq!(num(peak, "offered_rate"), Some(30e3));
        let s = protocol_summary(&points, Protocol::Creek);
        assert_eq!(s["peak_throughput_ops_per_sec"], json!(25_000.0));
        assert_eq!(s["peak_at_highest_rate"], json!(false));
        assert_eq!(
            protocol_summary(&points, Protocol::Archie)["peak_at_highest_rate"],
            json!(true)
        );
    }

    #[test]
    fn half_peak_points_are_added_for_creek_and_archie_unless_swept() {
        let mut points = sweep();
        assert_eq!(creek_half_peak(&points), Some(12_500.0));
        let extra = half_peak_specs(&fig1(), &points);
        let got: Vec<(Protocol, f64, bool)> = extra
            .iter()
            .map(|s| (s.protocol, s.rate, s.half_peak))
            .collect();
        assert_eq!(
            got,
            [
                (Protocol::Creek, 12_500.0, true),
                (Protocol::Archie, 12_500.0, true)
            ]
        );
        // A sweep point at exactly that rate is used instead.
        points.push(point(Protocol::Archie, 12_500.0, 12_400.0, false));
        let extra = half_peak_specs(&fig1(), &points);
        assert_eq!(extra.len(), 1);
        assert_eq!(extra[0].protocol, Protocol::Creek);
    }

    #[test]
    fn latencies_are_read_at_the_half_peak_point() {
        let mut points = sweep();
        points.push(point(Protocol::Creek, 12_500.0, 12_450.0, true));
        points.push(point(Protocol::Archie, 12_500.0, 12_480.0, true));
        let creek = protocol_summary(&points, Protocol::Creek);
        assert_eq!(creek["latency_at_rate"], json!(12_500.0));
        assert_eq!(creek["latency_us"]["weak_tentative"]["mean"], json!(125.0));
        assert_eq!(creek["latency_us"]["strong_stable"]["mean"], json!(250.0));
        assert!(creek["latency_us"].get("response").is_none());
        let archie = protocol_summary(&points, Protocol::Archie);
        assert_eq!(archie["latency_us"]["response"]["mean"], json!(1_250.0));
        // smr peaks at 2.7k: its point nearest 1.35k is the 1k one, and the
        // summary says its peak is below half of creek's.
        let smr = protocol_summary(&points, Protocol::Smr);
        assert_eq!(smr["latency_at_rate"], json!(1e3));
        assert!(smr["latency_at"]
            .as_str()
            .is_some_and(|s| s.contains("below half of creek's peak")));
        assert_eq!(smr["points"], json!(4));
    }

    #[test]
    fn targets_compare_the_right_numbers_with_their_thresholds() {
        let mut points = sweep();
        points.push(point(Protocol::Creek, 12_500.0, 12_450.0, true));
        points.push(point(Protocol::Archie, 12_500.0, 12_480.0, true));
        let s = variation_summary(&run(), &fig1(), &points);
        let t = &s["targets"];
        // 25k / 28k: missed; 25k / 2.7k = 9.26: missed.
        assert_eq!(t["creek_peak_vs_archie"]["met"], json!(false));
        assert_eq!(t["creek_peak_vs_smr"]["met"], json!(false));
        let v = t["creek_peak_vs_smr"]["value"].as_f64().unwrap_or(0.0);
        assert!((v - 25_000.0 / 2_700.0).abs() < 1e-9);
        // Means at 12.5k: weak tentative 125 / archie response 1250 = 0.1;
        // strong stable 250 / 1250 = 0.2: both met.
        assert_eq!(t["weak_tentative_vs_archie"]["value"], json!(0.1));
        assert_eq!(t["weak_tentative_vs_archie"]["met"], json!(true));
        assert_eq!(t["strong_stable_vs_archie"]["value"], json!(0.2));
        assert_eq!(t["strong_stable_vs_archie"]["threshold"], json!("<= 0.8"));
        // 5 warehouses: accuracy 0.995 >= 0.99, execution ratio 1.02 <= 1.05.
        assert_eq!(t["creek_accuracy"]["met"], json!(true));
        assert_eq!(t["creek_execution_ratio"]["met"], json!(true));

        // One warehouse relaxes the thresholds; a worse accuracy fails 5.
        for p in &mut points {
            p.insert("accuracy".into(), json!(0.96));
            p.insert("execution_ratio".into(), json!(1.4));
        }
        let t = &variation_summary(&run(), &fig1(), &points)["targets"];
        assert_eq!(t["creek_accuracy"]["met"], json!(false));
        assert_eq!(t["creek_execution_ratio"]["met"], json!(false));
        let t = &variation_summary(&run(), &VARIATIONS[1], &points)["targets"];
        assert_eq!(t["creek_accuracy"]["met"], json!(true));
        assert_eq!(t["creek_execution_ratio"]["met"], json!(true));
    }

    #[test]
    fn ratio_targets_need_both_protocols() {
        let points: Vec<Point> = sweep()
            .into_iter()
            .filter(|p| p["protocol"] == json!("creek"))
            .collect();
        let s = variation_summary(&run(), &fig1(), &points);
        let t = s["targets"].as_object().expect("targets is an object");
        assert!(!t.contains_key("creek_peak_vs_archie"));
        assert!(!t.contains_key("weak_tentative_vs_archie"));
        // Creek's accuracy is missing without its half-peak point: unmet.
        assert_eq!(t["creek_accuracy"]["value"], json!(null));
        assert_eq!(t["creek_accuracy"]["met"], json!(false));
        assert_eq!(s["protocols"]["smr"]["consistency_ok"], json!(false));
    }

    #[test]
    fn the_markdown_puts_the_paper_beside_ours() {
        let mut points = sweep();
        points.push(point(Protocol::Creek, 12_500.0, 12_450.0, true));
        points.push(point(Protocol::Archie, 12_500.0, 12_480.0, true));
        let done = vec![(fig1(), variation_summary(&run(), &fig1(), &points))];
        let header = Header {
            date: "2026-01-02".into(),
            machine: "a test machine".into(),
            command: "creek bench paper".into(),
            notes: Some("Our own words.".into()),
        };
        let md = markdown(&header, &done);
        assert!(md.contains("| | creek | archie | smr | bayou |"), "{md}");
        assert!(
            md.contains("| peak throughput (tx/s) | 25.0k (paper: ~32.5k) | 28.0k (paper: ~35.0k) | 2.7k (paper: ~2.7k)"),
            "{md}"
        );
        assert!(
            md.contains("| weak tentative, mean (ms) | 0.125 (paper: ~0.5) | - |"),
            "{md}"
        );
        assert!(
            md.contains("| fig1 | creek's peak / archie's peak | 0.893 | >= 1 | missed |"),
            "{md}"
        );
        assert!(md.contains("![Figure 1: 5 warehouses, Payment strong](paper-fig1.png)"));
        assert!(md.contains("## Analysis\n\nOur own words.\n"), "{md}");
        assert!(md.contains("2026-01-02"));
    }

    #[test]
    fn only_rejects_unknown_variations_and_keeps_the_papers_order() {
        let err = select(&["fig1".into(), "fig9".into()]).expect_err("fig9 is unknown");
        assert!(err.contains("fig9") && err.contains("strong50"), "{err}");
        let got: Vec<&str> = select(&["long5".into(), "wh1".into()])
            .expect("known names")
            .iter()
            .map(|v| v.label)
            .collect();
        assert_eq!(got, ["wh1", "long5"]);
        assert_eq!(select(&[]).expect("all").len(), VARIATIONS.len());
    }

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
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_818), (2026, 12, 31));
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
        let _ = fs::remove_dir_all(&dir);
    }
}
