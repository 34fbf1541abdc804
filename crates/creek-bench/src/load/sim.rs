//! The simulator target: one simulation per point, no faults, the paper's
//! network and CPU model (`--replicas`, `--cores`, `--link-us`, 1 Gbps
//! links, the per-procedure execution costs of `SimConfig::default`).

use std::time::Instant;

use creek_sim::bench::sim_point;
use creek_sim::config::SimConfig;
use creek_sim::sim::Sim;
use creek_sim::workload::Workload;
use serde_json::{json, Map, Value as Json};

use super::{describe, point_header, Emit, Load, Plan, Progress};

pub(super) fn run(p: &Plan, progress: &Progress, emit: Emit<'_>) -> Result<(), String> {
    let sharded = p.shards != [1];
    // Throughput of each (load, shard count), for the scaling summary.
    let mut throughput: Vec<(usize, usize, f64)> = Vec::new();
    // TPC-C says where its remote warehouses come from instead (`remote`).
    let swept = p.cross != [0.0] && p.bench != "tpcc";
    let points = p.shards.iter().flat_map(|s| {
        p.cross.iter().flat_map(move |c| {
            p.loads
                .iter()
                .enumerate()
                .map(move |(l, load)| (*s, *c, l, *load))
        })
    });
    for (i, (shards, cross, load_index, load)) in points.enumerate() {
        let mut what = describe(load);
        if sharded {
            what = format!("{what} per shard on {shards} shards");
        }
        if swept {
            what = format!("{what}, {cross} across shards");
        }
        progress.start(i, &what);
        // Loads count per shard: a sweep over shards keeps each shard's
        // share of the load.
        let (clients, rate) = match load {
            Load::Open(r) => (0, r * shards as f64),
            Load::Closed(c) => (c * shards, 0.0),
        };
        let cfg = SimConfig {
            protocol: p.common.protocol,
            replicas: p.replicas,
            shards,
            cores: p.common.cores,
            seed: p.common.seed,
            workload: p.bench.into(),
            duration_us: p.warmup_us + p.duration_us,
            warmup_us: p.warmup_us,
            clients,
            think_us: 0,
            weak_answer_on_preliminary: true,
            open_rate_per_sec: rate,
            latency_us: p.link_us,
            // The paper's setting: state in memory, no fsync time.
            fsync_us: (0, 0),
            linger_us: 0,
            cross_shard: cross,
            mpo_order: p.common.mpo_order,
            snapshot_reads: p.common.snapshot_reads,
            stable_every_us: p.common.stable_every,
            ..SimConfig::default()
        };
        let bar = *progress;
        let bar_what = what.clone();
        let measured = sim_point_for(
            cfg,
            || p.workload(shards, cross),
            move |now, total| bar.update(i, now as f64 / total as f64, &bar_what),
        )?;
        let mut point = point_header(p, load);
        if swept {
            point.insert("cross_shard".into(), json!(cross));
        }
        if sharded {
            point.insert("shards".into(), json!(shards));
        }
        if sharded && cross == 0.0 {
            let t = measured
                .get("throughput_ops_per_sec")
                .and_then(Json::as_f64)
                .unwrap_or(0.0);
            throughput.push((load_index, shards, t));
        }
        point.insert("cores".into(), json!(p.common.cores));
        point.insert("link_us".into(), json!([p.link_us.0, p.link_us.1]));
        point.insert("seed".into(), json!(p.common.seed));
        point.extend(measured);
        emit(point)?;
    }
    if sharded && !throughput.is_empty() {
        for summary in scaling_summaries(p, &throughput) {
            emit(summary)?;
        }
    }
    Ok(())
}

/// One summary per load of a sweep over shards: the throughput at each
/// shard count and the scaling efficiency T(S) / (S · T(1)) at the largest
/// S swept (`null` without a point at one shard).
fn scaling_summaries(p: &Plan, throughput: &[(usize, usize, f64)]) -> Vec<Map<String, Json>> {
    let max = p.shards.iter().copied().max().unwrap_or(1);
    (0..p.loads.len())
        .map(|l| {
            let at = |s: usize| {
                throughput
                    .iter()
                    .find(|(load, shards, _)| *load == l && *shards == s)
                    .map(|(_, _, t)| *t)
            };
            let efficiency = match (at(1), at(max)) {
                (Some(one), Some(top)) if one > 0.0 => json!(top / (max as f64 * one)),
                _ => json!(null),
            };
            let mut m = point_header(p, p.loads[l]);
            m.insert("summary".into(), json!("scaling"));
            m.insert(
                "throughput_by_shards".into(),
                Json::Object(
                    p.shards
                        .iter()
                        .map(|s| (s.to_string(), json!(at(*s))))
                        .collect(),
                ),
            );
            m.insert("max_shards".into(), json!(max));
            m.insert("scaling_efficiency".into(), efficiency);
            m
        })
        .collect()
}

/// One simulated point: build the workload and the simulation of `cfg`
/// (in the calling thread: a `Sim` is not `Send`), run it with
/// `on_progress` as its progress callback, and measure it: [`sim_point`]
/// plus `wall_s`, the wall time of setup (workload and replicas), run and
/// measurement.
pub(super) fn sim_point_for(
    cfg: SimConfig,
    workload: impl FnOnce() -> Result<Box<dyn Workload>, String>,
    on_progress: impl FnMut(u64, u64) + 'static,
) -> Result<Map<String, Json>, String> {
    let (replicas, cores) = (cfg.replicas, cfg.cores);
    let wall = Instant::now();
    let mut sim = Sim::new(cfg, workload()?)?;
    let setup_s = wall.elapsed().as_secs_f64();
    sim.on_progress(on_progress);
    let out = sim.run();
    let run_s = wall.elapsed().as_secs_f64() - setup_s;
    let mut point = sim_point(&out, replicas, cores);
    let measure_s = wall.elapsed().as_secs_f64() - setup_s - run_s;
    point.insert(
        "wall_s".into(),
        json!({"setup": setup_s, "run": run_s, "measure": measure_s}),
    );
    Ok(point)
}
