//! `creek sim`: run the deterministic simulator (one seed, or a swarm).

use creek_bench::flags::{parse_duration, parse_duration_or_zero};
use creek_sim::config::{Faults, Links, PlantedBug, Protocol, SimConfig};
use creek_sim::report::simulate;

/// Arguments of `creek sim`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// What the replicas run: creek, or a baseline (smr, bayou, archie).
    #[arg(long, default_value = "creek", value_parser = Protocol::parse)]
    protocol: Protocol,
    /// Replicas (of each shard).
    #[arg(long, default_value_t = 5)]
    replicas: usize,
    /// Shards, each a group of `--replicas` replicas owning its share of
    /// the keys; faults hit one shard at a time and the checks run per
    /// shard, with the ownership check (no shard ran an op on keys it does
    /// not own).
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// With --shards: the share of multi-key ops (bank transfers) whose
    /// keys the generator puts on two shards, each then an operation
    /// across shards (docs/cross-shard.md); 0 keeps every op on one shard.
    #[arg(long, default_value_t = 0.0)]
    cross_shard: f64,
    /// How operations across shards are ordered: sequencer (the
    /// directory's group, what servers run) or genuine (an atomic
    /// multicast among their shards only; without crashes, disk faults,
    /// partitions or membership changes).
    #[arg(long, default_value = "sequencer", value_parser = creek_core::MpoOrder::parse)]
    mpo_order: creek_core::MpoOrder,
    /// With --shards: move keys between shards while the clients run (the
    /// reshard fault class): this many moves one after another, each of a
    /// random slot range of one shard to another, driven by the
    /// protocol's mover under the run's faults and checked across the
    /// whole cluster (docs/shards.md, "Moving keys between shards").
    #[arg(long, default_value_t = 0)]
    moves: usize,
    /// The share of read-only ops issued at the snapshot level (each to a
    /// random replica of its shard, with the client's read time; strong
    /// ones with all three views), checked against the committed order
    /// cut at each view's time (docs/snapshot-reads.md).
    #[arg(long, default_value_t = 0.0)]
    snapshot_reads: f64,
    /// The share of weak ops that ask for their preliminary view only once
    /// durable (half after their replica's write, half once a majority
    /// holds them), checked never to be lost where that promises.
    #[arg(long, default_value_t = 0.0)]
    durable_weak: f64,
    /// Stable times every this long (e.g. 5ms; 0: off): replicas report
    /// their applied times, shards publish their stable times, idle
    /// leaders commit clock no-ops; the report gives the global stable
    /// time's lag and visibility latency (docs/snapshot-reads.md).
    #[arg(long, default_value = "0", value_parser = parse_duration_or_zero)]
    stable_every: u64,
    /// Cores per replica.
    #[arg(long, default_value_t = 4)]
    cores: usize,
    /// Workload: kv, bank, list, queue, tpcc, ycsb, tickets, procs.
    #[arg(long, default_value = "kv")]
    workload: String,
    /// Seed of a single run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A swarm: run every seed in `A..B` and print one line per seed.
    #[arg(long)]
    seeds: Option<String>,
    /// Virtual time clients run, e.g. `10s`, `500ms`.
    #[arg(long, default_value = "2s")]
    duration: String,
    /// Fault classes: partition,crash,clock,loss,disk,wipe,wipe2,member,
    /// `all` or `none` (`all` has one wipe; `wipe2` loses up to two disks;
    /// `member` adds and removes replicas).
    #[arg(long, default_value = "none")]
    faults: String,
    /// Closed-loop client sessions.
    #[arg(long, default_value_t = 20)]
    clients: usize,
    /// Open-loop arrivals per second on top of the sessions (0 = none).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Break the protocol in a named way to show the checkers catch it (a
    /// tool for validating the checkers, never for production).
    #[arg(long)]
    plant_bug: Option<String>,
    /// The multiversion executor's schedule: both (fresh ops first and held
    /// reruns; the server's), lowest-first, fresh-first, held-reruns.
    #[arg(long, default_value = "both", value_parser = creek_exec::mvcc::Schedule::parse)]
    schedule: creek_exec::mvcc::Schedule,
    /// Links between replicas: lan (0.2–0.3 ms one way), or wan (each
    /// directed link 10–150 ms one way, asymmetric, jittered).
    #[arg(long, default_value = "lan", value_parser = Links::parse)]
    links: Links,
    /// How often each replica's invariants are checked (virtual time, e.g.
    /// `20ms`; `0` never).
    #[arg(long, default_value = "20ms")]
    invariants_every: String,
    /// Print one JSON object per run.
    #[arg(long)]
    json: bool,
}

fn parse_seeds(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s.split_once("..").ok_or("--seeds takes A..B")?;
    let a: u64 = a.trim().parse().map_err(|_| "bad seed range start")?;
    let b: u64 = b.trim().parse().map_err(|_| "bad seed range end")?;
    if b <= a {
        return Err("--seeds A..B needs A < B".into());
    }
    Ok((a, b))
}

/// Run `creek sim`; `Ok(false)` when a check failed.
pub fn run(args: &Args) -> Result<bool, String> {
    let base = SimConfig {
        protocol: args.protocol,
        replicas: args.replicas,
        shards: args.shards,
        cross_shard: args.cross_shard,
        mpo_order: args.mpo_order,
        moves: args.moves,
        snapshot_reads: args.snapshot_reads,
        durable_weak: args.durable_weak,
        stable_every_us: args.stable_every,
        cores: args.cores,
        seed: args.seed,
        workload: args.workload.clone(),
        duration_us: parse_duration(&args.duration)?,
        clients: args.clients,
        open_rate_per_sec: args.rate,
        faults: Faults::parse(&args.faults)?,
        schedule: args.schedule,
        links: args.links,
        invariants_every_us: parse_duration_or_zero(&args.invariants_every)?,
        plant_bug: args
            .plant_bug
            .as_deref()
            .map(PlantedBug::parse)
            .transpose()?,
        ..SimConfig::default()
    };
    base.validate()?;
    let Some(range) = &args.seeds else {
        let (report, ok) = simulate(&base)?;
        creek_bench::print_report(&report, args.json)?;
        return Ok(ok);
    };
    let (a, b) = parse_seeds(range)?;
    let mut failed = Vec::new();
    for seed in a..b {
        let cfg = SimConfig {
            seed,
            ..base.clone()
        };
        let (report, ok) = simulate(&cfg)?;
        if args.json {
            println!("{report}");
        } else {
            println!(
                "seed {seed}: {} ops={} faults={} hash={}",
                if ok { "ok  " } else { "FAIL" },
                report["ops"]["total"],
                report["faults"],
                report["trace_hash"].as_str().unwrap_or("?")
            );
        }
        if !ok {
            eprintln!(
                "  reproduce: creek sim --protocol {} --schedule {} --links {} --replicas {} --shards {} --cores {} --workload {} --duration {} --faults {} --clients {} --rate {}{} --seed {seed}\n  {}",
                args.protocol.name(),
                args.schedule.name(),
                args.links.name(),
                args.replicas,
                args.shards,
                args.cores,
                args.workload,
                args.duration,
                args.faults,
                args.clients,
                args.rate,
                extra_flags(args),
                report["violations"]
            );
            failed.push(seed);
        }
    }
    eprintln!(
        "{} of {} seeds failed{}",
        failed.len(),
        b - a,
        if failed.is_empty() {
            String::new()
        } else {
            format!(": {failed:?}")
        }
    );
    Ok(failed.is_empty())
}

/// The flags of a run's reproduce line beyond those every line names:
/// those given other than their defaults.
fn extra_flags(args: &Args) -> String {
    let mut out = String::new();
    if args.cross_shard > 0.0 {
        out += &format!(" --cross-shard {}", args.cross_shard);
    }
    if args.mpo_order != creek_core::MpoOrder::Sequencer {
        out += " --mpo-order genuine";
    }
    if args.moves > 0 {
        out += &format!(" --moves {}", args.moves);
    }
    if args.snapshot_reads > 0.0 {
        out += &format!(" --snapshot-reads {}", args.snapshot_reads);
    }
    if args.durable_weak > 0.0 {
        out += &format!(" --durable-weak {}", args.durable_weak);
    }
    if args.stable_every > 0 {
        out += &format!(" --stable-every {}us", args.stable_every);
    }
    if let Some(b) = &args.plant_bug {
        out += &format!(" --plant-bug {b}");
    }
    out
}
