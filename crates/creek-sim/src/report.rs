//! Runs every checker over a finished simulation and builds its report.

use std::collections::{BTreeMap, BTreeSet};

use creek_core::{OpId, ReplicaId};
use creek_exec::basic::replay_from;
use creek_exec::{Outcome as ExecOutcome, ProcCall, TxnLimits};
use serde_json::{json, Value};

use crate::check::{linearizable, order};
use crate::config::SimConfig;
use crate::sim::Outcome;
use crate::workload::Workload;

/// The verdict of one checker.
#[derive(Clone, Debug)]
pub struct Check {
    /// Its name in the report.
    pub name: &'static str,
    /// Whether it passed.
    pub ok: bool,
    /// What failed, one line each (bounded).
    pub violations: Vec<String>,
    /// How conclusive the check was (e.g. the linearizability search).
    pub note: Option<String>,
}

fn check(name: &'static str, violations: Vec<String>) -> Check {
    let mut violations = violations;
    violations.truncate(20);
    Check {
        name,
        ok: violations.is_empty(),
        violations,
        note: None,
    }
}

/// All checkers.
pub fn run_checks(cfg: &SimConfig, out: &Outcome) -> Vec<Check> {
    let workload: &dyn Workload = out.workload.as_ref();
    let mut checks = Vec::new();
    let lists: Vec<&[OpId]> = out.nodes.iter().map(|n| n.committed()).collect();
    let canonical: Vec<OpId> = lists
        .iter()
        .max_by_key(|l| l.len())
        .map(|l| l.to_vec())
        .unwrap_or_default();

    // Committed prefix: seen during the run, and at the end.
    let mut prefix = Vec::new();
    if let Some(v) = &out.prefix_violation {
        prefix.push(v.clone());
    }
    for (i, l) in lists.iter().enumerate() {
        if !canonical.starts_with(l) {
            prefix.push(format!(
                "replica {i}'s committed list is not a prefix of the longest"
            ));
        }
    }
    checks.push(check("committed_prefix", prefix));

    // Convergence after heal and quiescence.
    let mut conv = Vec::new();
    if !out.settled {
        conv.push("the cluster did not settle within the time limit".to_string());
    }
    // A replica that knows it lost its data takes no part (it waits to be
    // rebuilt): it is left out, as long as the others hold everything.
    let states: Vec<_> = out.nodes.iter().map(|n| n.committed_state()).collect();
    let reference = out.nodes.iter().position(|n| !n.is_lost());
    for (i, n) in out.nodes.iter().enumerate() {
        if n.is_lost() {
            continue;
        }
        if n.committed() != canonical.as_slice() {
            conv.push(format!(
                "replica {i} committed {} ops, the longest list has {}",
                n.committed().len(),
                canonical.len()
            ));
        }
        if n.finalized() != n.committed().len() as u64 {
            conv.push(format!(
                "replica {i} has {} committed ops without a final execution",
                n.committed().len() as u64 - n.finalized()
            ));
        }
        if n.pending_len() > 0 {
            conv.push(format!(
                "replica {i} still has {} uncommitted ops",
                n.pending_len()
            ));
        }
        if let Some(r) = reference.filter(|r| states[*r] != states[i]) {
            conv.push(format!(
                "replica {i}'s committed state differs from replica {r}'s"
            ));
        }
    }
    checks.push(check("converged", conv));

    // Liveness: once the faults healed, everything completes within the
    // documented bound.
    let mut live = Vec::new();
    match out.settled_after_us {
        Some(t) if t > out.liveness_bound_us => live.push(format!(
            "the cluster settled {} ms after the faults healed; the bound is {} ms",
            t / 1000,
            out.liveness_bound_us / 1000
        )),
        Some(_) => {}
        None => live.push("strong ops still incomplete at the time limit".into()),
    }
    checks.push(check("liveness", live));

    // Replay: nothing lost, duplicated or invented; every final view and the
    // state equal a sequential execution of the committed order.
    let mut replay_v = Vec::new();
    let unique: BTreeSet<OpId> = canonical.iter().copied().collect();
    if unique.len() != canonical.len() {
        replay_v.push("an op appears twice in the committed order".into());
    }
    let mut calls: Vec<&ProcCall> = Vec::new();
    for id in &canonical {
        match out.ops.get(id) {
            Some(op) => calls.push(&op.call),
            None => replay_v.push(format!("{id} committed but never broadcast (invented)")),
        }
    }
    let initial = if out.preloaded {
        workload.preload().into_iter().collect()
    } else {
        BTreeMap::new()
    };
    let (outcomes, state) = replay_from(&out.registry, TxnLimits::default(), initial, calls);
    let outcome_of: BTreeMap<OpId, &ExecOutcome> =
        canonical.iter().copied().zip(outcomes.iter()).collect();
    for r in &out.history.ops {
        let (Some(id), Some(f)) = (r.id, r.final_view()) else {
            continue;
        };
        match outcome_of.get(&id) {
            Some(o) if **o == f.outcome => {}
            Some(o) => replay_v.push(format!(
                "final view of {id} ({}) is {:?}; replay gives {:?}",
                r.call.name, f.outcome, o
            )),
            None => replay_v.push(format!("{id} got a final view but is not committed")),
        }
    }
    if reference.is_some_and(|r| states[r] != state) {
        replay_v.push("the committed state differs from a replay of the committed order".into());
    }
    checks.push(check("replay_matches", replay_v));

    // No acknowledged op lost. Every broadcast op commits — except an
    // unacknowledged op of an origin that lost its disk: one that never
    // left it is gone with the disk (one that reached a peer still commits,
    // or `converged` finds it pending); an acknowledged one was committed
    // by a majority and is checked below like any other.
    let wiped = |origin: ReplicaId| {
        out.nodes
            .get(usize::from(origin.0).wrapping_sub(1))
            .is_some_and(|n| n.disk_counts().wipes > 0)
    };
    let mut lost = Vec::new();
    for id in out.ops.keys() {
        if !unique.contains(id) && !wiped(id.origin) {
            lost.push(format!("{id} was broadcast but never committed"));
        }
    }
    for r in &out.history.ops {
        let Some(id) = r.id else { continue };
        let acked = r.final_view().is_some() || (!r.views.is_empty() && !r.origin_crashed);
        if acked && !unique.contains(&id) {
            lost.push(format!(
                "{id} ({}) was acknowledged but is not in the final order",
                r.call.name
            ));
        }
    }
    checks.push(check("no_lost_acks", lost));

    // Linearizability of strong ops.
    // Strong ops with their observed final outcomes, plus the replicated weak
    // ops as ops of unknown outcome that take effect at some point after
    // their invocation: Creek promises linearizable strong ops in an order
    // that also contains the weak ones (paper §4.3), not that weak ops are
    // absent.
    let mut lin_ops = linearizable::strong_ops(&out.history);
    for (index, r) in out.history.ops.iter().enumerate() {
        if !r.strong && r.id.is_some() {
            lin_ops.push(linearizable::LinOp {
                index,
                call: r.call.clone(),
                invoked_at_us: r.invoked_at_us,
                completed: None,
            });
        }
    }
    let keys = |c: &ProcCall| workload.keys(c);
    let (lin, note) = match linearizable::check(
        &lin_ops,
        &keys,
        &out.registry,
        TxnLimits::default(),
        cfg.lin_budget_steps,
    ) {
        linearizable::LinResult::Ok { partitions, ops } => (
            Vec::new(),
            format!("linearizable: {ops} ops in {partitions} partitions"),
        ),
        linearizable::LinResult::Violation(v) => {
            let note = format!("violation on keys {:?}", v.keys);
            (
                vec![format!(
                    "not linearizable on keys {:?}: {}",
                    v.keys, v.reason
                )],
                note,
            )
        }
        linearizable::LinResult::Inconclusive { reason } => {
            (Vec::new(), format!("inconclusive: {reason}"))
        }
    };
    let mut lin_check = check("linearizable", lin);
    lin_check.note = Some(note);
    checks.push(lin_check);
    checks.push(check(
        "real_time",
        order::check_real_time(&out.history, &canonical),
    ));
    checks.push(check(
        "session_order",
        order::check_session_order(&out.history, &canonical),
    ));
    checks.push(check("workload", workload.check(&out.history, &state)));
    checks
}

/// The JSON report of one run.
pub fn report(cfg: &SimConfig, out: &Outcome, checks: &[Check]) -> Value {
    let h = &out.history.ops;
    let strong = h.iter().filter(|r| r.strong).count();
    let local = h.iter().filter(|r| r.id.is_none()).count();
    let weak = h.len() - strong;
    let mut tentative = Vec::new();
    let mut stable = Vec::new();
    let mut completed = 0u64;
    for r in h {
        if let Some(v) = r.first_tentative() {
            tentative.push(v.at_us - r.invoked_at_us);
        }
        if let Some(v) = r.final_view() {
            if r.strong {
                stable.push(v.at_us - r.invoked_at_us);
            }
        }
        let done = if r.wants_final {
            r.final_view().is_some()
        } else {
            !r.views.is_empty()
        };
        completed += u64::from(done);
    }
    let mut counts = crate::replica::ReplicaCounts::default();
    for n in &out.nodes {
        counts += n.counts();
    }
    let (hits, checked) = (counts.accuracy_hits, counts.accuracy_checked);
    let (executions, inserted) = (counts.executions, counts.ops);
    let replicated = h.iter().filter(|r| r.id.is_some()).count().max(1);
    let mut disk = crate::replica::DiskCounts::default();
    for n in &out.nodes {
        disk += n.disk_counts();
    }
    let checks_obj: serde_json::Map<String, Value> = checks
        .iter()
        .map(|c| (c.name.to_string(), json!(c.ok)))
        .collect();
    let mut checks_obj = checks_obj;
    checks_obj.insert("ok".into(), json!(checks.iter().all(|c| c.ok)));
    let violations: Vec<String> = checks
        .iter()
        .flat_map(|c| c.violations.iter().map(move |v| format!("{}: {v}", c.name)))
        .take(10)
        .collect();
    json!({
        "seed": cfg.seed,
        "protocol": cfg.protocol.name(),
        "schedule": cfg.schedule.name(),
        "workload": cfg.workload,
        "links": cfg.links.name(),
        "replicas": cfg.replicas,
        "cores": cfg.cores,
        "duration_us": out.duration_us,
        "ops": { "total": h.len(), "weak": weak, "strong": strong, "local_reads": local },
        "faults": out.faults,
        "checks": checks_obj,
        "violations": violations,
        "notes": checks.iter().filter_map(|c| c.note.clone()).collect::<Vec<_>>(),
        "accuracy": if checked == 0 { json!(null) } else { json!(hits as f64 / checked as f64) },
        "execution_ratio": if inserted == 0 { json!(null) } else { json!(executions as f64 / inserted as f64) },
        "latency_us": { "tentative": crate::bench::percentiles(tentative), "stable": crate::bench::percentiles(stable) },
        "throughput_ops_per_sec": completed as f64 / (out.duration_us as f64 / 1e6),
        "bytes": {
            "consensus": out.traffic.cab_bytes,
            "gossip": out.traffic.gossip_bytes,
            "consensus_per_strong_op": out.traffic.cab_bytes as f64 / strong.max(1) as f64,
            "gossip_per_op": out.traffic.gossip_bytes as f64 / replicated as f64,
        },
        "settled_after_ms": out.settled_after_us.map(|t| t as f64 / 1000.0),
        "liveness_bound_ms": out.liveness_bound_us / 1000,
        "recoveries": disk.recoveries,
        "unsynced_writes_lost": disk.unsynced_writes_lost,
        "disk": {
            "syncs": disk.syncs,
            "sync_failures": disk.sync_failures,
            "torn_changes_kept": disk.torn_changes_kept,
            "repairs": disk.repairs,
            "wipes": disk.wipes,
            "log_compacted": disk.log_compacted,
            "log_entries": disk.log_entries,
            "checkpoints": disk.checkpoints,
            "checkpoints_cut": disk.checkpoints_cut,
        },
        "plant_bug": cfg.plant_bug.map(|b| format!("{b:?}")),
        "trace_hash": format!("{:016x}", out.trace_hash),
    })
}

/// Run one simulation end to end: build, run, check, report.
pub fn simulate(cfg: &SimConfig) -> Result<(Value, bool), String> {
    let workload =
        crate::workload::by_name(&cfg.workload, &crate::workload::WorkloadConfig::default())?;
    let sim = crate::sim::Sim::new(cfg.clone(), workload)?;
    // A replica that panics (a broken assertion, or the consensus library
    // refusing a state a bug produced) fails the run with its message,
    // instead of ending a swarm.
    let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run())) {
        Ok(outcome) => outcome,
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic".to_owned());
            let report = json!({
                "seed": cfg.seed,
                "protocol": cfg.protocol.name(),
                "schedule": cfg.schedule.name(),
                "workload": cfg.workload,
                "ops": { "total": 0 },
                "faults": {},
                "checks": { "no_panic": false, "ok": false },
                "violations": [format!("no_panic: {why}")],
                "trace_hash": "-",
            });
            return Ok((report, false));
        }
    };
    let checks = run_checks(cfg, &outcome);
    let ok = checks.iter().all(|c| c.ok);
    Ok((report(cfg, &outcome, &checks), ok))
}
