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
    for (i, &load) in p.loads.iter().enumerate() {
        let what = describe(load);
        progress.start(i, &what);
        let (clients, rate) = match load {
            Load::Open(r) => (0, r),
            Load::Closed(c) => (c, 0.0),
        };
        let cfg = SimConfig {
            protocol: p.common.protocol,
            replicas: p.replicas,
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
            ..SimConfig::default()
        };
        let bar = *progress;
        let measured = sim_point_for(
            cfg,
            || p.workload(),
            move |now, total| bar.update(i, now as f64 / total as f64, &what),
        )?;
        let mut point = point_header(p, load);
        point.insert("cores".into(), json!(p.common.cores));
        point.insert("link_us".into(), json!([p.link_us.0, p.link_us.1]));
        point.insert("seed".into(), json!(p.common.seed));
        point.extend(measured);
        emit(point)?;
    }
    Ok(())
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
