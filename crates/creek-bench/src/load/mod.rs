//! `creek bench tpcc|ycsb|tickets`: one harness, two targets.
//!
//! The workload code is the simulator's [`Workload`] (the same generator,
//! setup and checks); `--target sim` runs it in the deterministic
//! simulator, `--target cluster` against real `creek serve` processes on
//! loopback through the Rust client. Both record what clients saw as a
//! [`creek_check::history::History`] and measure it with
//! [`creek_sim::bench`], so a point means the same on both.
//!
//! A run is a sweep: open-loop rates (`--rate 5000,10000,…`, Poisson
//! arrivals independent of answers) or closed-loop client counts
//! (`--clients 1,16,64`, each client waiting for its op before the next).
//! Each point runs `--warmup` then `--duration`; only the ops invoked after
//! the warm-up are measured. One JSON object per point (`--json`: one line
//! each), with a progress bar on stderr when it is a terminal.
//!
//! `--protocol` picks what the simulated replicas run: Creek or one of the
//! baselines it is measured against (a cluster always runs Creek).
//! `creek bench paper` (`paper/`) sweeps all four at the paper's setting.

pub(crate) mod cluster;
mod paper;
mod sim;

pub use paper::{paper, PaperArgs};

use std::io::{IsTerminal, Write};
use std::time::Instant;

use creek_sim::config::Protocol;
use creek_sim::workload::{self, Workload, WorkloadConfig};
use creek_workloads::ycsb::{Distribution, Mix, YcsbConfig};
use serde_json::{json, Map, Value as Json};

use crate::flags::{parse_duration, parse_duration_or_zero};

/// Where the workload runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// The deterministic simulator (modelled network and CPUs).
    Sim,
    /// `creek serve` processes on loopback (or `--attach`ed ones).
    Cluster,
}

/// Arguments every `creek bench <workload>` takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Where to run.
    #[arg(long, value_enum, default_value = "sim")]
    target: Target,
    /// What the replicas run: creek, or a baseline (smr, bayou, archie;
    /// sim target only).
    #[arg(long, default_value = "creek", value_parser = Protocol::parse)]
    protocol: Protocol,
    /// Replicas (default: 5 in the simulator, 3 on a cluster).
    #[arg(long)]
    replicas: Option<usize>,
    /// Cores per replica (sim).
    #[arg(long, default_value_t = 16)]
    cores: usize,
    /// Shard counts to sweep (sim), e.g. `1,2,4,8`: each point runs that
    /// many shards of `--replicas` replicas, with `--clients`, `--rate`
    /// and TPC-C's `--warehouses` counted per shard, and the sweep ends
    /// with a summary line of the scaling efficiency T(max) / (max · T(1)).
    #[arg(long, value_delimiter = ',')]
    shards: Vec<usize>,
    /// Shares of operations across shards to sweep (sim, with `--shards`
    /// of 2 or more; bank and ycsb), e.g. `0,0.01,0.05,0.1,0.2`: that share
    /// of the ops spans two shards (docs/cross-shard.md).
    #[arg(long, value_delimiter = ',')]
    cross_shard: Vec<f64>,
    /// How operations across shards are ordered (sim): `sequencer` (the
    /// directory's group, what servers run) or `genuine` (an atomic
    /// multicast among their shards only, measured against it).
    #[arg(long, default_value = "sequencer", value_parser = creek_core::MpoOrder::parse)]
    pub(crate) mpo_order: creek_core::MpoOrder,
    /// The share of read-only ops issued at the snapshot level (sim): the
    /// committed state at the replica's applied time, never ordered
    /// (docs/snapshot-reads.md).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) snapshot_reads: f64,
    /// Stable times every this long (sim; e.g. 5ms; 0: off).
    #[arg(long, default_value = "0", value_parser = crate::flags::parse_duration_or_zero)]
    pub(crate) stable_every: u64,
    /// One-way link latency range in microseconds, `MIN-MAX` (sim).
    #[arg(long, default_value = "200-300")]
    link_us: String,
    /// Open-loop rates to sweep, ops per second (e.g. `5000,10000,20000`).
    #[arg(long, value_delimiter = ',')]
    rate: Vec<f64>,
    /// Closed-loop client counts to sweep (used when no `--rate` is given).
    #[arg(long, value_delimiter = ',', default_value = "16")]
    clients: Vec<usize>,
    /// Measured time per point, e.g. `5s`.
    #[arg(long, default_value = "5s")]
    duration: String,
    /// Warm-up per point, not measured.
    #[arg(long, default_value = "1s")]
    warmup: String,
    /// Seed of the simulation and the generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Measure a running cluster at these client addresses instead of
    /// starting one (cluster target).
    #[arg(long, value_delimiter = ',')]
    attach: Vec<std::net::SocketAddr>,
    /// A label naming this variant in the output (for the plots).
    #[arg(long)]
    label: Option<String>,
    /// One JSON line per point.
    #[arg(long)]
    json: bool,
}

/// `creek bench tpcc`.
#[derive(clap::Args, Debug)]
pub struct TpccArgs {
    #[command(flatten)]
    common: Common,
    /// Warehouses (the specification's cardinalities per warehouse); with
    /// `--shards`, per shard (in contiguous blocks, one per shard).
    #[arg(long, default_value_t = 5)]
    warehouses: u16,
    /// Share of transactions run strong, picked at random; default:
    /// Payment strong, the others weak.
    #[arg(long)]
    strong_share: Option<f64>,
    /// Divide the specification's items, customers and orders per district
    /// by this (warehouses and districts keep their number): 10 lets a
    /// sweep to 8 shards of 5 replicas fit in this machine's memory.
    #[arg(long, default_value_t = 1)]
    row_divisor: u32,
    /// Remote warehouses (New-Order's supplying warehouses, 1 % of lines;
    /// Payment's customer's, 15 %): `shard` draws them from the home
    /// warehouse's shard (every transaction on one shard), `spec` from
    /// every warehouse as the specification does (those on another shard
    /// run across shards), `off` uses none (all at the home warehouse).
    #[arg(long, value_enum, default_value = "shard")]
    remote: Remote,
}

/// Where TPC-C's remote warehouses are drawn from (`--remote`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Remote {
    /// The home warehouse's shard.
    Shard,
    /// Every warehouse (the specification).
    Spec,
    /// None: every access at the home warehouse.
    Off,
}

/// `creek bench ycsb`.
#[derive(clap::Args, Debug)]
pub struct YcsbArgs {
    #[command(flatten)]
    common: Common,
    /// Core workload: a (50% reads), b (95%), c (100%).
    #[arg(long, default_value = "a")]
    workload: String,
    /// Request distribution: uniform, zipfian, latest.
    #[arg(long, default_value = "zipfian")]
    distribution: String,
    /// Records loaded.
    #[arg(long, default_value_t = 1_000)]
    records: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Share of ops issued strong.
    #[arg(long, default_value_t = 0.1)]
    strong_share: f64,
}

/// `creek bench tickets`.
#[derive(clap::Args, Debug)]
pub struct TicketsArgs {
    #[command(flatten)]
    common: Common,
    /// Events on sale, each with its own stock.
    #[arg(long, default_value_t = 4)]
    events: usize,
    /// Tickets per event.
    #[arg(long, default_value_t = 2_000)]
    tickets: usize,
    /// Sell on the preliminary view while more tickets than this are left.
    #[arg(long, default_value_t = 20)]
    threshold: usize,
}

/// One point of a sweep.
#[derive(Clone, Copy, Debug)]
pub enum Load {
    /// Poisson arrivals at this rate (ops/s).
    Open(f64),
    /// This many clients, each with one op in flight.
    Closed(usize),
}

/// A validated run: which workload with which settings, and the sweep.
pub struct Plan {
    bench: &'static str,
    config: WorkloadConfig,
    common: Common,
    replicas: usize,
    link_us: (u64, u64),
    warmup_us: u64,
    duration_us: u64,
    loads: Vec<Load>,
    /// Settings echoed in every point.
    settings: Map<String, Json>,
    /// Builds the workload of a benchmark outside `workload::by_name`
    /// (`creek bench groups`); `None`: the workload named `bench`.
    make: Option<MakeWorkload>,
    /// The shard counts swept (`[1]` without `--shards`).
    shards: Vec<usize>,
    /// The shares of operations across shards swept (`[0]` without
    /// `--cross-shard`).
    cross: Vec<f64>,
    /// TPC-C: `--warehouses` counts per shard.
    warehouses_per_shard: Option<u16>,
}

/// A workload of a benchmark's own, built afresh for each point.
pub(crate) type MakeWorkload = Box<dyn Fn() -> Result<Box<dyn Workload>, String>>;

impl Plan {
    /// A fresh workload for one point on `shards` shards (same settings
    /// every time).
    fn workload(&self, shards: usize, cross: f64) -> Result<Box<dyn Workload>, String> {
        match &self.make {
            Some(make) => make(),
            None => {
                let mut config = self.config.clone();
                config.cross_shard = cross;
                if let Some(w) = self.warehouses_per_shard {
                    let total = usize::from(w) * shards;
                    let total = u16::try_from(total)
                        .map_err(|_| format!("{total} warehouses are too many"))?;
                    config.tpcc_warehouses = Some(total);
                }
                workload::by_name(self.bench, &config)
            }
        }
    }

    /// A plan running the workload `make` builds, named `bench`, with the
    /// load, target and timing of `common`.
    pub(crate) fn custom(
        bench: &'static str,
        common: &Common,
        make: MakeWorkload,
    ) -> Result<Plan, String> {
        let mut p = plan(bench, common, WorkloadConfig::default())?;
        p.make = Some(make);
        Ok(p)
    }

    /// Echo `value` as `key` in every point.
    pub(crate) fn set(&mut self, key: &str, value: Json) {
        self.settings.insert(key.into(), value);
    }

    /// Run the plan, handing each point to `emit` (nothing is printed but
    /// the progress on stderr).
    pub(crate) fn run_with(&self, emit: Emit<'_>) -> Result<(), String> {
        let progress = Progress::new(self.loads.len() * self.shards.len() * self.cross.len());
        let mut emit = |point: Map<String, Json>| {
            progress.finish();
            emit(point)
        };
        match self.common.target {
            Target::Sim => sim::run(self, &progress, &mut emit),
            Target::Cluster => cluster::run(self, &progress, &mut emit),
        }
    }
}

impl Common {
    /// `--json`.
    pub(crate) fn json(&self) -> bool {
        self.json
    }
}

fn parse_link(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let a: u64 = a
        .trim()
        .parse()
        .map_err(|_| format!("bad --link-us {s:?}"))?;
    let b: u64 = b
        .trim()
        .parse()
        .map_err(|_| format!("bad --link-us {s:?}"))?;
    if a > b || b == 0 {
        return Err(format!(
            "--link-us {s:?} must be MIN-MAX with 0 < MAX and MIN <= MAX"
        ));
    }
    Ok((a, b))
}

fn plan(bench: &'static str, common: &Common, config: WorkloadConfig) -> Result<Plan, String> {
    let loads: Vec<Load> = if common.rate.is_empty() {
        common.clients.iter().map(|&c| Load::Closed(c)).collect()
    } else {
        common.rate.iter().map(|&r| Load::Open(r)).collect()
    };
    for l in &loads {
        match *l {
            Load::Open(r) if !(r.is_finite() && r > 0.0) => {
                return Err(format!("--rate {r} must be a positive number"))
            }
            Load::Closed(0) => return Err("--clients must be positive".into()),
            _ => {}
        }
    }
    if common.target == Target::Cluster && common.protocol != Protocol::Creek {
        return Err(format!(
            "--protocol {} runs only in the simulator (--target sim); a cluster runs creek",
            common.protocol.name()
        ));
    }
    let replicas = common.replicas.unwrap_or(match common.target {
        Target::Sim => 5,
        Target::Cluster => 3,
    });
    let least = match common.target {
        Target::Sim => 3,
        Target::Cluster => 1,
    };
    if !(least..=9).contains(&replicas) || common.cores == 0 {
        return Err(format!(
            "--replicas must be within {least}..=9 for this target and --cores positive"
        ));
    }
    let warmup_us = parse_duration_or_zero(&common.warmup)?;
    if !common.shards.is_empty() && common.target != Target::Sim {
        return Err("--shards sweeps run in the simulator (--target sim)".into());
    }
    let max = creek_sim::config::MAX_SHARDS;
    if common.shards.iter().any(|s| !(1..=max).contains(s)) {
        return Err(format!("--shards must be within 1..={max}"));
    }
    if common.cross_shard.iter().any(|c| !(0.0..=1.0).contains(c)) {
        return Err("--cross-shard shares must be within 0..=1".into());
    }
    if common.cross_shard.iter().any(|c| *c > 0.0) && common.shards.iter().all(|s| *s < 2) {
        return Err("--cross-shard needs --shards of 2 or more".into());
    }
    if !common.cross_shard.is_empty() && !matches!(bench, "bank" | "ycsb") {
        return Err(format!(
            "--cross-shard: {bench} has no operations across shards yet (bank and ycsb do)"
        ));
    }
    let mut settings = Map::new();
    settings.insert("bench".into(), json!(bench));
    settings.insert(
        "target".into(),
        json!(match common.target {
            Target::Sim => "sim",
            Target::Cluster => "cluster",
        }),
    );
    settings.insert("protocol".into(), json!(common.protocol.name()));
    if let Some(l) = &common.label {
        settings.insert("label".into(), json!(l));
    }
    settings.insert("replicas".into(), json!(replicas));
    Ok(Plan {
        bench,
        link_us: parse_link(&common.link_us)?,
        warmup_us,
        duration_us: parse_duration(&common.duration)?,
        config,
        common: common.clone(),
        replicas,
        loads,
        settings,
        make: None,
        shards: if common.shards.is_empty() {
            vec![1]
        } else {
            common.shards.clone()
        },
        cross: if common.cross_shard.is_empty() {
            vec![0.0]
        } else {
            common.cross_shard.clone()
        },
        warehouses_per_shard: None,
    })
}

/// Run `creek bench tpcc`.
pub fn tpcc(args: &TpccArgs) -> Result<(), String> {
    if args.row_divisor == 0 || args.row_divisor > 100 {
        return Err("--row-divisor must be within 1..=100".into());
    }
    let config = WorkloadConfig {
        tpcc_warehouses: Some(args.warehouses),
        tpcc_row_divisor: args.row_divisor,
        tpcc_strong_share: args.strong_share,
        // Every transaction asks for its final view too, so that accuracy
        // and the final latencies are measured for all of them.
        final_share: 1.0,
        preload: args.common.target == Target::Sim,
        tpcc_local: args.remote == Remote::Off,
        ..WorkloadConfig::default()
    };
    let mut p = plan("tpcc", &args.common, config)?;
    if args.remote == Remote::Spec {
        // Above 0, the workload draws remote warehouses from all of them.
        p.cross = vec![1.0];
    }
    p.settings.insert(
        "remote".into(),
        json!(match args.remote {
            Remote::Shard => "shard",
            Remote::Spec => "spec",
            Remote::Off => "off",
        }),
    );
    p.settings
        .insert("warehouses".into(), json!(args.warehouses));
    if args.row_divisor != 1 {
        p.settings
            .insert("row_divisor".into(), json!(args.row_divisor));
    }
    if !args.common.shards.is_empty() {
        p.warehouses_per_shard = Some(args.warehouses);
        p.settings
            .insert("warehouses_per_shard".into(), json!(args.warehouses));
    }
    p.settings.insert(
        "strong_share".into(),
        args.strong_share.map_or(json!("payment"), |s| json!(s)),
    );
    run(&p)
}

/// Run `creek bench ycsb`.
pub fn ycsb(args: &YcsbArgs) -> Result<(), String> {
    let mix = Mix::parse(&args.workload).ok_or("--workload must be a, b or c")?;
    let distribution = Distribution::parse(&args.distribution)
        .ok_or("--distribution must be uniform, zipfian or latest")?;
    let config = WorkloadConfig {
        ycsb: YcsbConfig {
            mix,
            records: args.records,
            value_bytes: args.value_bytes,
            distribution,
            strong_share: args.strong_share,
        },
        // Every op asks for both views: divergence is measured on all.
        final_share: 1.0,
        ..WorkloadConfig::default()
    };
    let mut p = plan("ycsb", &args.common, config)?;
    p.settings
        .insert("workload".into(), json!(args.workload.to_ascii_lowercase()));
    p.settings
        .insert("distribution".into(), json!(args.distribution));
    p.settings.insert("records".into(), json!(args.records));
    p.settings
        .insert("strong_share".into(), json!(args.strong_share));
    run(&p)
}

/// Run `creek bench tickets`.
pub fn tickets(args: &TicketsArgs) -> Result<(), String> {
    let config = WorkloadConfig {
        events: args.events,
        tickets: args.tickets,
        ticket_threshold: args.threshold,
        ..WorkloadConfig::default()
    };
    let mut p = plan("tickets", &args.common, config)?;
    p.settings.insert("events".into(), json!(args.events));
    p.settings.insert("tickets".into(), json!(args.tickets));
    p.settings.insert("threshold".into(), json!(args.threshold));
    run(&p)
}

/// Where each point goes as soon as it is measured.
pub(crate) type Emit<'a> = &'a mut dyn FnMut(Map<String, Json>) -> Result<(), String>;

fn run(p: &Plan) -> Result<(), String> {
    let progress = Progress::new(p.loads.len() * p.shards.len() * p.cross.len());
    let mut failed = false;
    let mut emit = |point: Map<String, Json>| {
        failed |= point.get("consistency_ok") == Some(&json!(false));
        progress.finish();
        crate::print_report(&Json::Object(point), p.common.json)
    };
    match p.common.target {
        Target::Sim => sim::run(p, &progress, &mut emit)?,
        Target::Cluster => cluster::run(p, &progress, &mut emit)?,
    }
    if failed {
        return Err("a point's consistency check failed (consistency_ok: false)".into());
    }
    Ok(())
}

/// The settings of one point, in front of its measurements.
fn point_header(p: &Plan, load: Load) -> Map<String, Json> {
    let mut m = p.settings.clone();
    match load {
        Load::Open(r) => {
            m.insert("mode".into(), json!("open"));
            m.insert("offered_rate".into(), json!(r));
            m.insert("clients".into(), json!(null));
        }
        Load::Closed(c) => {
            m.insert("mode".into(), json!("closed"));
            m.insert("offered_rate".into(), json!(null));
            m.insert("clients".into(), json!(c));
        }
    }
    m.insert("warmup_s".into(), json!(p.warmup_us as f64 / 1e6));
    m.insert("duration_s".into(), json!(p.duration_us as f64 / 1e6));
    m
}

/// A progress bar on stderr (a line per point when stderr is not a
/// terminal).
#[derive(Clone, Copy)]
pub struct Progress {
    points: usize,
    tty: bool,
    started: Instant,
}

impl Progress {
    pub(crate) fn new(points: usize) -> Self {
        Progress {
            points,
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
        }
    }

    /// Point `i` (0-based) is `fraction` done; `what` names it.
    pub(crate) fn update(&self, i: usize, fraction: f64, what: &str) {
        if !self.tty {
            return;
        }
        let total = (i as f64 + fraction.clamp(0.0, 1.0)) / self.points as f64;
        let width = 30;
        let filled = (total * width as f64) as usize;
        eprint!(
            "\r[{}{}] {:>3.0}%  point {}/{} {what}  {:.0}s ",
            "#".repeat(filled),
            "-".repeat(width - filled),
            total * 100.0,
            i + 1,
            self.points,
            self.started.elapsed().as_secs_f64()
        );
        let _ = std::io::stderr().flush();
    }

    /// Point `i` starts.
    fn start(&self, i: usize, what: &str) {
        if self.tty {
            self.update(i, 0.0, what);
        } else {
            eprintln!("bench: point {}/{} {what}", i + 1, self.points);
        }
    }

    /// End the bar's line (before a point is printed).
    pub(crate) fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// How a load is shown in the progress line.
fn describe(load: Load) -> String {
    match load {
        Load::Open(r) => format!("at {r} ops/s"),
        Load::Closed(c) => format!("with {c} clients"),
    }
}
