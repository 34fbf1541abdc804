//! Benchmark measurements over what clients saw. The simulator and the
//! cluster target of `creek bench` both record a [`History`] (virtual or
//! wall-clock microseconds) and measure it with these functions, so a point
//! means the same on both.
//!
//! A point measures the window after the warm-up: latencies of the ops
//! invoked in it, throughput of the ops that completed in it (an op
//! completes at its final view if it asked for one, else at its first).

use creek_check::history::{History, OpRecord};
use serde_json::{json, Map, Value as Json};

use crate::sim::{Outcome, Totals};
use crate::workload::Workload;

/// `p50`, `p90`, `p99`, `max`, `mean` and `count` of `xs`; null when empty.
pub fn percentiles(mut xs: Vec<u64>) -> Json {
    if xs.is_empty() {
        return json!(null);
    }
    xs.sort_unstable();
    let at = |q: f64| percentile(&xs, q);
    let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / xs.len() as f64;
    json!({
        "p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1.0),
        "mean": mean.round(), "count": xs.len(),
    })
}

/// The `q` quantile (`0.0..=1.0`) of `sorted` (ascending), the nearest
/// rank; 0 when empty. The one definition every benchmark uses.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    match sorted.len() {
        0 => 0,
        n => sorted[(((n - 1) as f64 * q).round() as usize).min(n - 1)],
    }
}

/// The measured stretch of a run, microseconds.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// End of the warm-up.
    pub start_us: u64,
    /// When the clients stopped.
    pub end_us: u64,
}

impl Window {
    /// Its length in seconds.
    pub fn seconds(&self) -> f64 {
        self.end_us.saturating_sub(self.start_us) as f64 / 1e6
    }

    fn contains(&self, at_us: u64) -> bool {
        (self.start_us..self.end_us).contains(&at_us)
    }
}

/// When `op` completed for its client, if it did.
pub fn completed_at(op: &OpRecord) -> Option<u64> {
    if op.wants_final {
        op.final_view().map(|v| v.at_us)
    } else {
        op.views.first().map(|v| v.at_us)
    }
}

/// The ops invoked in `window` (setup calls are never measured).
pub fn measured(history: &History, window: Window) -> Vec<&OpRecord> {
    history
        .ops
        .iter()
        .filter(|op| !op.is_setup() && window.contains(op.invoked_at_us))
        .collect()
}

/// Latency percentiles by level and view: `weak_tentative`, `weak_final`,
/// `strong_tentative`, `strong_stable` (time from invocation to the first
/// tentative view, and to the final view, whether stable or confirmation),
/// `snapshot` (to the snapshot view, docs/snapshot-reads.md),
/// and `response`: every op, to the view its client waited for
/// ([`completed_at`]) — the one latency of protocols that answer once.
pub fn latency_series(ops: &[&OpRecord]) -> Json {
    let mut series: [Vec<u64>; 4] = Default::default();
    let response: Vec<u64> = ops
        .iter()
        .filter_map(|op| completed_at(op).map(|at| at - op.invoked_at_us))
        .collect();
    for op in ops {
        let base = if op.strong { 2 } else { 0 };
        if let Some(v) = op.first_tentative() {
            series[base].push(v.at_us - op.invoked_at_us);
        }
        if let Some(v) = op.final_view() {
            series[base + 1].push(v.at_us - op.invoked_at_us);
        }
    }
    let [wt, wf, st, ss] = series;
    let snapshot: Vec<u64> = ops
        .iter()
        .filter_map(|op| {
            let v = op
                .views
                .iter()
                .find(|v| v.kind == creek_core::ViewKind::Snapshot)?;
            Some(v.at_us - op.invoked_at_us)
        })
        .collect();
    json!({
        "snapshot": percentiles(snapshot),
        "weak_tentative": percentiles(wt),
        "weak_final": percentiles(wf),
        "strong_tentative": percentiles(st),
        "strong_stable": percentiles(ss),
        "response": percentiles(response),
    })
}

/// The measurements every target shares: op counts, throughput, latency
/// series, and the workload's own measurements.
pub fn client_side(
    history: &History,
    window: Window,
    workload: &dyn Workload,
) -> Map<String, Json> {
    let ops = measured(history, window);
    let done = history
        .ops
        .iter()
        .filter(|op| !op.is_setup())
        .filter_map(completed_at)
        .filter(|&at| window.contains(at))
        .count();
    let strong = ops.iter().filter(|op| op.strong).count();
    let unanswered = ops.iter().filter(|op| completed_at(op).is_none()).count();
    let mut m = Map::new();
    m.insert(
        "ops".into(),
        json!({
            "measured": ops.len(), "weak": ops.len() - strong, "strong": strong,
            "unanswered": unanswered,
        }),
    );
    m.insert(
        "throughput_ops_per_sec".into(),
        json!((done as f64 / window.seconds()).round()),
    );
    m.insert("latency_us".into(), latency_series(&ops));
    m.extend(across_shards(&ops));
    m.extend(workload.measure(&ops));
    m
}

/// Operations across shards among `ops` (a run without them: nothing):
/// their share, and the stable latency of theirs and of the single-shard
/// strong ops (`mpo_stable_p50_us`, `strong_stable_p50_us`, the p99s).
pub fn across_shards(ops: &[&OpRecord]) -> Map<String, Json> {
    let mut m = Map::new();
    let is_mpo = |op: &OpRecord| op.call.name.as_ref() == creek_procs::mpo::RUN;
    let mpos = ops.iter().filter(|op| is_mpo(op)).count();
    if mpos == 0 {
        return m;
    }
    let (mut across, mut single) = (Vec::new(), Vec::new());
    for op in ops.iter().filter(|op| op.strong) {
        if let Some(v) = op.final_view() {
            let at = v.at_us - op.invoked_at_us;
            if is_mpo(op) {
                across.push(at);
            } else {
                single.push(at);
            }
        }
    }
    for v in [&mut across, &mut single] {
        v.sort_unstable();
    }
    let p = |xs: &[u64], q: f64| {
        if xs.is_empty() {
            json!(null)
        } else {
            json!(percentile(xs, q))
        }
    };
    m.insert("mpo_share".into(), json!(mpos as f64 / ops.len() as f64));
    m.insert("mpo_stable_p50_us".into(), p(&across, 0.5));
    m.insert("mpo_stable_p99_us".into(), p(&across, 0.99));
    m.insert("strong_stable_p50_us".into(), p(&single, 0.5));
    m.insert("strong_stable_p99_us".into(), p(&single, 0.99));
    m
}

/// `n / of`, or null when `of` is 0 (accuracy, execution ratio).
pub fn ratio(n: u64, of: u64) -> Json {
    if of == 0 {
        json!(null)
    } else {
        json!(n as f64 / of as f64)
    }
}

/// The simulator's point: [`client_side`] plus what the replicas counted
/// (accuracy and execution ratio from the end of the warm-up to the end of
/// the run, CPU busy share in the window, bytes on the wire in the window)
/// and whether the workload's consistency conditions hold on every
/// replica's committed state (`consistency_ok`, only if the run settled).
pub fn sim_point(out: &Outcome, replicas: usize, cores: usize) -> Map<String, Json> {
    let window = Window {
        start_us: out.readings.warmup.at_us,
        end_us: out.readings.end.at_us,
    };
    let mut m = client_side(&out.history, window, out.workload.as_ref());
    let run: Totals = out.readings.finish.since(&out.readings.warmup);
    let in_window: Totals = out.readings.end.since(&out.readings.warmup);
    m.insert(
        "accuracy".into(),
        ratio(run.counts.accuracy_hits, run.counts.accuracy_checked),
    );
    m.insert(
        "execution_ratio".into(),
        ratio(run.counts.executions, run.counts.ops),
    );
    // Why executions repeat, per op: a completion rejected because a read
    // changed while it ran, or an installed execution rolled back later.
    m.insert(
        "reexecution_causes".into(),
        json!({
            "conflicts_per_op": ratio(run.counts.conflicts, run.counts.ops),
            "invalidations_per_op": ratio(run.counts.invalidations, run.counts.ops),
        }),
    );
    let all_replicas = replicas * out.map.shards.len();
    let capacity_us = (cores * all_replicas) as f64 * (window.seconds() * 1e6);
    m.insert(
        "cpu_busy".into(),
        json!((in_window.busy_us as f64 / capacity_us).min(1.0)),
    );
    let measured_ops = m["ops"]["measured"].as_u64().unwrap_or(0).max(1);
    let t = in_window.traffic;
    m.insert(
        "bytes".into(),
        json!({
            "consensus": t.cab_bytes, "gossip": t.gossip_bytes,
            "per_op": (t.cab_bytes + t.gossip_bytes) as f64 / measured_ops as f64,
        }),
    );
    m.insert("consistency_ok".into(), json!(consistency_ok(out)));
    m.insert("settled".into(), json!(out.settled));
    m
}

/// Whether the run settled with every replica at the same committed order
/// and the workload's conditions holding on each replica's committed state
/// (the replicas are checked in parallel: a TPC-C state holds millions of
/// records).
pub fn consistency_ok(out: &Outcome) -> bool {
    // Settled: every replica up, quiet, with the same committed list.
    if !out.settled {
        return false;
    }
    let workload = out.workload.as_ref();
    let shards = out.map.shards.len();
    // Each shard's replicas are judged on the ops invoked in that shard.
    let histories: Vec<History> = (0..shards).map(|s| out.shard_history(s)).collect();
    std::thread::scope(|scope| {
        // The shards' replicas (the directory's hold the map, not data).
        let checks: Vec<_> = out.nodes[..shards * out.per_shard]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let s = i / out.per_shard;
                let history = &histories[s];
                scope.spawn(move || {
                    let state = n.committed_state();
                    if shards == 1 {
                        workload.check(history, &state).is_empty()
                    } else {
                        let shard = creek_shard::ShardId(s as u16);
                        workload
                            .check_shard(&out.map, shard, history, &state)
                            .is_empty()
                    }
                })
            })
            .collect();
        checks.into_iter().all(|c| c.join().unwrap_or(false))
    })
}
