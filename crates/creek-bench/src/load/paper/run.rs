//! Running points: a validated run, the simulation of one point at the
//! paper's setting, the worker pool that runs many, and the sink that
//! reports and streams them to `paper.jsonl`.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use creek_exec::mvcc::Schedule;
use creek_sim::config::{default_costs_us, Protocol, SimConfig};
use creek_sim::workload::{self, WorkloadConfig};
use serde_json::{json, Map, Value as Json};

use super::summary::num;
use super::variations::{select, strong_share_json, Variation, PROTOCOLS};
use super::{schedule_name, PaperArgs};
use crate::load::sim::sim_point_for;

/// Replicas in every point (the paper's cluster, §6).
pub(super) const REPLICAS: usize = 5;
/// Cores per replica.
pub(super) const CORES: usize = 16;
/// One-way link latency range, microseconds.
pub(super) const LINK_US: (u64, u64) = (200, 300);

/// How much of the evaluation a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Full,
    Quick,
    Tiny,
}

const QUICK_FAST_RATES: &[f64] = &[15e3, 30e3, 40e3, 50e3];
const QUICK_SLOW_RATES: &[f64] = &[1e3, 2e3, 3e3, 4e3];
const TINY_RATES: &[f64] = &[250.0, 500.0, 1000.0];

impl Mode {
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Quick => "quick",
            Mode::Tiny => "tiny",
        }
    }

    pub(super) fn warmup_us(self) -> u64 {
        match self {
            Mode::Full => 300_000,
            Mode::Quick => 100_000,
            Mode::Tiny => 20_000,
        }
    }

    pub(super) fn duration_us(self) -> u64 {
        match self {
            Mode::Full => 1_000_000,
            Mode::Quick => 300_000,
            Mode::Tiny => 50_000,
        }
    }

    /// The rates `protocol` sweeps in `v`.
    pub(super) fn rates(self, v: &Variation, protocol: Protocol) -> &'static [f64] {
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
    pub(super) fn warehouses(self, v: &Variation) -> Option<u16> {
        (self != Mode::Tiny).then_some(v.warehouses)
    }
}

/// A validated run.
pub(super) struct Run {
    pub(super) mode: Mode,
    pub(super) seed: u64,
    pub(super) jobs: usize,
    pub(super) variations: Vec<Variation>,
    /// The protocols run, in [`PROTOCOLS`] order.
    pub(super) protocols: Vec<Protocol>,
    /// Rates every protocol sweeps instead of the variation's own.
    pub(super) rates: Option<Vec<f64>>,
    /// The multiversion executor's schedule.
    pub(super) schedule: Schedule,
    /// Where files go, if anywhere.
    pub(super) out: Option<PathBuf>,
}

/// The run `args` ask for, or why they make none.
pub(super) fn validate(args: &PaperArgs) -> Result<Run, String> {
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
    let protocols: Vec<Protocol> = PROTOCOLS
        .into_iter()
        .filter(|p| args.protocols.is_empty() || args.protocols.contains(p))
        .collect();
    if let Some(bad) = args.rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(format!("--rates must be positive rates, not {bad}"));
    }
    let rates = (!args.rates.is_empty()).then(|| args.rates.clone());
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
        protocols,
        rates,
        schedule: args.schedule,
        out,
    })
}

/// A measured point: its settings and measurements, as in `paper.jsonl`.
pub(super) type Point = Map<String, Json>;

/// Where [`run_points`] hands each finished point.
type Done<'a> = &'a mut dyn FnMut(&Spec, Point) -> Result<(), String>;

/// One point to simulate.
#[derive(Clone, Copy, Debug)]
pub(super) struct Spec {
    pub(super) variation: Variation,
    pub(super) protocol: Protocol,
    pub(super) rate: f64,
    /// The extra point at half of Creek's peak (else a sweep point).
    pub(super) half_peak: bool,
}

/// The sweep of `v`: every protocol run at each of its rates, in
/// [`PROTOCOLS`] order.
pub(super) fn sweep_specs(run: &Run, v: &Variation) -> Vec<Spec> {
    run.protocols
        .iter()
        .flat_map(|&protocol| {
            let rates = run
                .rates
                .as_deref()
                .unwrap_or_else(|| run.mode.rates(v, protocol));
            rates.iter().map(move |&rate| Spec {
                variation: *v,
                protocol,
                rate,
                half_peak: false,
            })
        })
        .collect()
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
        replicas: REPLICAS,
        cores: CORES,
        seed: run.seed,
        workload: "tpcc".into(),
        duration_us: run.mode.warmup_us() + run.mode.duration_us(),
        warmup_us: run.mode.warmup_us(),
        clients: 0,
        think_us: 0,
        weak_answer_on_preliminary: true,
        open_rate_per_sec: spec.rate,
        latency_us: LINK_US,
        cost_us,
        default_cost_us: defaults.default_cost_us * factor,
        schedule: run.schedule,
        // The paper's replicas kept their state in memory: no fsync time,
        // no gathering of writes.
        fsync_us: (0, 0),
        linger_us: 0,
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
    m.insert("schedule".into(), json!(schedule_name(cfg.schedule)));
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
pub(super) fn run_points(
    run: &Run,
    specs: &[Spec],
    jobs: usize,
    done: Done<'_>,
) -> Result<(), String> {
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

/// Where finished points go: a progress line, `paper.jsonl`, the
/// variation's list.
pub(super) struct Sink {
    jsonl: Option<(File, PathBuf)>,
    started: Instant,
    finished: usize,
    /// Whether a point's consistency check failed.
    pub(super) failed: bool,
}

impl Sink {
    /// Points to `jsonl` (if any); the clock of the progress lines starts.
    pub(super) fn new(jsonl: Option<(File, PathBuf)>) -> Sink {
        Sink {
            jsonl,
            started: Instant::now(),
            finished: 0,
            failed: false,
        }
    }

    /// Report `point`, append it to `paper.jsonl` and to `points`.
    pub(super) fn keep(
        &mut self,
        spec: &Spec,
        point: Point,
        points: &mut Vec<Point>,
    ) -> Result<(), String> {
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
                .map_err(|e| cannot_write(path, &e))?;
        }
        points.push(point);
        Ok(())
    }
}

/// Create `dir` and truncate `dir/paper.jsonl`, before anything runs (an
/// unwritable directory fails here).
pub(super) fn open_points_file(dir: &Path) -> Result<(File, PathBuf), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create --out {}: {e}", dir.display()))?;
    let path = dir.join("paper.jsonl");
    let file = File::create(&path).map_err(|e| cannot_write(&path, &e))?;
    Ok((file, path))
}

/// The error of a failed write to `path`.
pub(super) fn cannot_write(path: &Path, e: &std::io::Error) -> String {
    format!("cannot write {}: {e}", path.display())
}
