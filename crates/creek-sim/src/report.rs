//! Runs every checker (`creek_check`) over a finished simulation and builds
//! its report.

mod moves;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use creek_check::history::History;
use creek_check::run::{check_run, Check, ReplicaEnd, RunEnd};
use creek_core::ViewKind;
use std::sync::Arc;

use creek_shard::{RouteError, ShardId, ShardMap};
use serde_json::{json, Value};

use crate::config::{Protocol, SimConfig};
use crate::sim::{DirectoryEnd, Outcome};
use crate::workload::Workload;

/// All checkers, over the simulator's end state: each shard's replicas,
/// history and data checked as a group of their own (one shard: the whole
/// run), and on a sharded cluster the ownership check.
pub fn run_checks(cfg: &SimConfig, out: &Outcome) -> Vec<Check> {
    let mut merged: Vec<Check> = Vec::new();
    for s in 0..cfg.shards {
        for check in shard_checks(cfg, out, s) {
            let check = if cfg.shards > 1 {
                Check {
                    violations: check
                        .violations
                        .into_iter()
                        .map(|v| format!("shard {s}: {v}"))
                        .collect(),
                    note: check.note.map(|n| format!("shard {s}: {n}")),
                    ..check
                }
            } else {
                check
            };
            merge(&mut merged, check);
        }
    }
    if cfg.shards > 1 {
        merged.push(Check::new("ownership", ownership_violations(out)));
    }
    if cfg.stable_every_us > 0 {
        merged.push(Check::new("stable_times", out.stable.regressions.clone()));
    }
    if cfg.durable_weak > 0.0 {
        merged.push(Check::new(
            "durable_weak",
            out.durability_violations.clone(),
        ));
    }
    if cfg.snapshot_reads > 0.0 && cfg.shards > 1 {
        merged.push(Check::new(
            "snapshot_across_shards",
            crate::sim::split_violations(&out.history, &out.split_reads),
        ));
    }
    if cfg.snapshot_reads > 0.0 {
        merged.push(Check::new(
            "read_your_writes",
            creek_check::snapshot::check_read_your_writes(&out.history, &out.client_reads),
        ));
    }
    if cfg.shards > 1 && (cfg.cross_shard > 0.0 || cfg.moves > 0) {
        for check in cross_shard_check(cfg, out) {
            merge(&mut merged, check);
        }
    }
    if let Some(dir) = &out.directory {
        for check in directory_checks(cfg, out, dir) {
            merge(&mut merged, check);
        }
    }
    merged
}

/// Add `check` to `merged`, into the check of its name if there is one.
fn merge(merged: &mut Vec<Check>, check: Check) {
    match merged.iter_mut().find(|c| c.name == check.name) {
        Some(c) => {
            c.ok &= check.ok;
            c.violations.extend(check.violations);
            c.note = match (c.note.take(), check.note) {
                (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                (a, b) => a.or(b),
            };
        }
        None => merged.push(check),
    }
}

/// The end of group `g`'s run as the checkers take it: its replicas
/// (`slots`), the ops they broadcast and the run's outcome, judged on
/// `history` from `initial_state` with `registry`.
fn group_run<'a>(
    cfg: &SimConfig,
    out: &'a Outcome,
    g: usize,
    slots: std::ops::Range<usize>,
    history: &'a History,
    registry: &'a creek_procs::Registry,
    initial_state: BTreeMap<Bytes, Bytes>,
) -> RunEnd<'a> {
    let in_group = |replica: u16| slots.contains(&usize::from(replica).wrapping_sub(1));
    let replicas = slots
        .clone()
        .map(|i| (i, &out.nodes[i], out.members[i]))
        .map(|(i, n, member)| ReplicaEnd {
            id: creek_core::ReplicaId(i as u16 + 1),
            committed: n.committed(),
            commit_times: n.commit_times(),
            finalized: n.finalized(),
            pending: n.pending_len(),
            committed_state: n.committed_state(),
            lost: n.is_lost() || !member,
            wiped: n.disk_counts().wipes > 0,
        })
        .collect();
    RunEnd {
        history,
        replicas,
        broadcast: out
            .ops
            .iter()
            .filter(|(id, _)| in_group(id.origin.0))
            .map(|(id, op)| (*id, out.mpo_calls.get(id).unwrap_or(&op.call)))
            .collect(),
        broadcast_complete: true,
        registry,
        keeps_versions: cfg.protocol == Protocol::Creek,
        initial_state,
        prefix_violation: out
            .prefix_violation
            .as_ref()
            .filter(|(group, _)| *group == g)
            .map(|(_, v)| v.clone()),
        settled: out.settled,
        settled_after_us: out.settled_after_us,
        liveness_bound_us: out.liveness_bound_us,
        lin_budget_steps: cfg.lin_budget_steps,
    }
}

/// The directory group's checks, as a shard's (its replicas, and the
/// operator's ops as its history: each reads or installs the map, a
/// strong op over one key), and the `directory` check: every map adopted
/// could follow the one held, and the run ended with the directory's map
/// listing the groups and every shard replica serving under it.
fn directory_checks(cfg: &SimConfig, out: &Outcome, dir: &DirectoryEnd) -> Vec<Check> {
    let run = group_run(
        cfg,
        out,
        cfg.shards,
        dir.slots.clone(),
        &dir.history,
        &dir.registry,
        BTreeMap::new(),
    );
    let map_key = Bytes::from_static(creek_procs::builtins::directory::MAP_KEY);
    // The map the directory holds decodes, is valid and keeps every owner
    // of the map the cluster was formed with.
    let invariants = |_: &History, state: &BTreeMap<Bytes, Bytes>| match state.get(&map_key) {
        None => vec!["the directory holds no map".to_owned()],
        Some(bytes) => match creek_shard::decode(bytes) {
            Err(e) => vec![format!("the directory's map does not decode: {e}")],
            Ok(map) if map.epoch == out.map.epoch => (map != *out.map)
                .then(|| "the directory's map at epoch 1 is not the formation map".to_owned())
                .into_iter()
                .collect(),
            Ok(map) => out
                .map
                .check_later(&map)
                .err()
                .map(|e| format!("the directory's map (epoch {}): {e}", map.epoch))
                .into_iter()
                .collect(),
        },
    };
    // The sequencer's ops are judged by the replay of the directory's
    // committed order (each final view against it), not for
    // linearizability: each touches keys of its own MPO's shards.
    let keys = |c: &creek_types::ProcCall| {
        if c.name.as_ref() == creek_procs::builtins::directory::SEQUENCE {
            Vec::new()
        } else {
            vec![map_key.clone()]
        }
    };
    let mut checks: Vec<Check> = check_run(run, &keys, &invariants)
        .into_iter()
        .map(|c| Check {
            violations: c
                .violations
                .into_iter()
                .map(|v| format!("directory: {v}"))
                .collect(),
            ..c
        })
        .collect();
    let mut violations = dir.violations.clone();
    violations.extend(dir.lag.iter().map(|l| format!("at the end: {l}")));
    checks.push(Check::new("directory", violations));
    checks
}

/// Whether shard `s` keeps record `key` of the workload's data under
/// `map`: it owns it, or every shard keeps it
/// ([`Workload::record_route`]).
fn owns(out: &Outcome, map: &ShardMap, s: usize, key: &Bytes) -> bool {
    out.workload
        .record_route(key)
        .is_none_or(|(ks, k)| usize::from(map.owner(ks.as_deref(), &k).0) == s)
}

/// The checks of shard `s`: its replicas, the ops invoked at them and
/// broadcast by them, and the data it owns.
fn shard_checks(cfg: &SimConfig, out: &Outcome, s: usize) -> Vec<Check> {
    let workload: &dyn Workload = out.workload.as_ref();
    let slots = out.shard_slots(s);
    let owned = |key: &Bytes| cfg.shards == 1 || owns(out, &out.map, s, key);
    let initial_state = if out.preloaded {
        workload
            .preload()
            .into_iter()
            .filter(|(k, _)| owned(k))
            .collect()
    } else {
        BTreeMap::new()
    };
    let history = out.shard_history(s);
    let run = group_run(cfg, out, s, slots, &history, &out.registry, initial_state);
    // With operations across shards, linearizability is judged over the
    // whole cluster's history instead (`cross_shard_check`): an MPO's
    // effect on one shard's keys is the whole call's.
    let shard = ShardId(s as u16);
    let invariants = |h: &History, state: &BTreeMap<Bytes, Bytes>| {
        if cfg.shards == 1 {
            workload.check(h, state)
        } else if cfg.moves > 0 {
            // Keys changed shards: the workload's invariants hold over the
            // whole cluster (`cross_shard_check`).
            Vec::new()
        } else {
            workload.check_shard(&out.map, shard, h, state)
        }
    };
    let across = cfg.cross_shard > 0.0 || cfg.moves > 0;
    check_run(
        run,
        &|c| if across { Vec::new() } else { workload.keys(c) },
        &invariants,
    )
}

/// Operations across shards (docs/cross-shard.md), over the whole
/// cluster: the workload's invariants over every shard's converged data
/// together (money moved between shards still sums to the total), and
/// every replica of a shard handed out the same reads for each MPO. Each
/// shard's replay of its committed order (in its own checks) runs every
/// MPO copy with the inputs it ran with, and compares every final view.
fn cross_shard_check(cfg: &SimConfig, out: &Outcome) -> Vec<Check> {
    let workload: &dyn Workload = out.workload.as_ref();
    let mut state = BTreeMap::new();
    for s in 0..out.shard_groups() {
        let Some(i) = reference_replica(out, s) else {
            continue;
        };
        // Each record from its owner at the end (a table every shard
        // keeps, from each: they hold the same).
        let owned = out.nodes[i].committed_state().into_iter().filter(|(k, _)| {
            k.first() != Some(&creek_procs::registry::INTERNAL_KEY_PREFIX)
                && owns(out, &out.final_map, s, k)
        });
        state.extend(owned);
    }
    // Every shard's ops together, each MPO as the client's call it runs
    // (its keys on several shards): the workload's invariants and
    // linearizability judge them.
    // The movers' ops copy data between shards: a key's history is the
    // clients' ops on it, wherever they ran. An op refused because its
    // keys had moved (`WRONG_SHARD`, recorded nowhere) took effect
    // nowhere: it is left out, as ops refused as expired are.
    let moved_away = |r: &creek_check::history::OpRecord| {
        r.final_view().is_some_and(|v| {
            v.outcome
                .as_ref()
                .is_err_and(|a| a.0.starts_with(creek_procs::ownership::WRONG_SHARD))
        })
    };
    let history = History {
        ops: out
            .history
            .ops
            .iter()
            .filter(|r| !crate::sim::is_mover(r.client) && !moved_away(r))
            .map(|r| match creek_procs::mpo::MpoCall::decode(&r.call.args) {
                Ok(mpo) if r.call.name.as_ref() == creek_procs::mpo::RUN => {
                    creek_check::history::OpRecord {
                        call: creek_types::ProcCall {
                            name: mpo.name.clone(),
                            args: mpo.args.clone(),
                            ..r.call.clone()
                        },
                        ..r.clone()
                    }
                }
                _ => r.clone(),
            })
            .collect(),
    };
    let mut violations = workload.check(&history, &state);
    violations.extend(out.mpo_violations.iter().cloned());
    violations.extend(mpo_outcome_violations(out));
    violations.extend(mpo_order_violations(out));
    violations.extend(mpo_time_violations(out));
    let initial_state = if out.preloaded {
        workload.preload().into_iter().collect()
    } else {
        BTreeMap::new()
    };
    let run = RunEnd {
        history: &history,
        replicas: Vec::new(),
        broadcast: BTreeMap::new(),
        broadcast_complete: false,
        registry: &out.registry,
        keeps_versions: true,
        initial_state,
        prefix_violation: None,
        settled: out.settled,
        settled_after_us: out.settled_after_us,
        liveness_bound_us: out.liveness_bound_us,
        lin_budget_steps: cfg.lin_budget_steps,
    };
    let lin = creek_check::run::linearizable_check(&run, &|c| workload.keys(c));
    vec![Check::new("cross_shard", violations), lin]
}

/// The replica whose end state stands for shard `s` in the checks across
/// shards: its first member that is up and holds its data (the shard's
/// own checks say whether its replicas agree).
fn reference_replica(out: &Outcome, s: usize) -> Option<usize> {
    out.shard_slots(s)
        .find(|&i| out.members[i] && out.nodes[i].is_up() && !out.nodes[i].is_lost())
}

/// An MPO commits at the same commit time on every shard it involves
/// (docs/snapshot-reads.md, "Commit times"): its first copy's time on each
/// shard's reference replica.
fn mpo_time_violations(out: &Outcome) -> Vec<String> {
    use creek_procs::mpo::{MpoCall, MpoId, RUN};
    let mut times: BTreeMap<MpoId, BTreeMap<usize, u64>> = BTreeMap::new();
    for s in 0..out.shard_groups() {
        let Some(i) = reference_replica(out, s) else {
            continue;
        };
        let node = &out.nodes[i];
        for (id, t) in node.committed().iter().zip(node.commit_times()) {
            let Some(op) = out.ops.get(id).filter(|op| op.call.name.as_ref() == RUN) else {
                continue;
            };
            // The first copy of each on the shard (a later one commits as
            // an answer, at its own time); unknown where a checkpoint
            // covered it (0).
            if let Ok(call) = MpoCall::decode(&op.call.args) {
                times.entry(call.id).or_default().entry(s).or_insert(*t);
            }
        }
    }
    times
        .into_iter()
        .filter(|(_, by_shard)| {
            let known: BTreeSet<_> = by_shard.values().filter(|t| **t != 0).collect();
            known.len() > 1
        })
        .take(10)
        .map(|(mpo, by_shard)| {
            format!("operation across shards {mpo} commits at different times on its shards: {by_shard:?}")
        })
        .collect()
}

/// The shards' committed orders agree on the MPOs they share: the graph
/// whose edges are each shard's consecutive MPOs (its first copy of each)
/// has no cycle, so one serial order contains every shard's.
fn mpo_order_violations(out: &Outcome) -> Vec<String> {
    use creek_procs::mpo::{MpoCall, MpoId, RUN};
    let mut edges: BTreeMap<MpoId, BTreeSet<MpoId>> = BTreeMap::new();
    let mut nodes: BTreeSet<MpoId> = BTreeSet::new();
    for s in 0..out.shard_groups() {
        let Some(i) = reference_replica(out, s) else {
            continue;
        };
        let mut seen = BTreeSet::new();
        let order: Vec<MpoId> = out.nodes[i]
            .committed()
            .iter()
            .filter_map(|id| out.ops.get(id))
            .filter(|op| op.call.name.as_ref() == RUN)
            .filter_map(|op| MpoCall::decode(&op.call.args).ok().map(|c| c.id))
            .filter(|m| seen.insert(*m))
            .collect();
        nodes.extend(order.iter().copied());
        for w in order.windows(2) {
            edges.entry(w[0]).or_default().insert(w[1]);
        }
    }
    // Kahn's algorithm: what is left once no node without a predecessor
    // remains lies on a cycle.
    let mut indegree: BTreeMap<MpoId, usize> = nodes.iter().map(|n| (*n, 0)).collect();
    for succ in edges.values() {
        for n in succ {
            *indegree.entry(*n).or_default() += 1;
        }
    }
    let mut ready: Vec<MpoId> = indegree
        .iter()
        .filter(|(_, d)| **d == 0)
        .map(|(n, _)| *n)
        .collect();
    while let Some(n) = ready.pop() {
        indegree.remove(&n);
        for m in edges.get(&n).into_iter().flatten() {
            if let Some(d) = indegree.get_mut(m) {
                *d -= 1;
                if *d == 0 {
                    ready.push(*m);
                }
            }
        }
    }
    if indegree.is_empty() {
        return Vec::new();
    }
    let cycle: Vec<String> = indegree.keys().take(6).map(|m| m.to_string()).collect();
    vec![format!(
        "the shards' committed orders of operations across shards have a cycle through {} MPOs ({}, …): no serial order contains them all",
        indegree.len(),
        cycle.join(", ")
    )]
}

/// Every shard's copy of an MPO ends the same way: a replay of each
/// shard's committed order (MPO copies with the inputs they ran with)
/// gives each copy's outcome; the first copy of an MPO on each shard must
/// agree with every other shard's.
fn mpo_outcome_violations(out: &Outcome) -> Vec<String> {
    use creek_procs::mpo::{MpoCall, MpoId, RUN};
    let mut outcomes: BTreeMap<MpoId, Vec<(usize, creek_exec::Outcome)>> = BTreeMap::new();
    for s in 0..out.shard_groups() {
        let Some(i) = reference_replica(out, s) else {
            continue;
        };
        let committed = out.nodes[i].committed();
        let calls: Vec<&creek_types::ProcCall> = committed
            .iter()
            .filter_map(|id| out.mpo_calls.get(id).or(out.ops.get(id).map(|o| &o.call)))
            .collect();
        if calls.len() != committed.len() {
            continue; // ops taken from a checkpoint: the shard's own checks judge it
        }
        let initial = if out.preloaded {
            out.workload
                .preload()
                .into_iter()
                .filter(|(k, _)| owns(out, &out.map, s, k))
                .collect()
        } else {
            BTreeMap::new()
        };
        let (results, _) = creek_exec::basic::replay_versioned(
            out.registry.as_ref(),
            creek_exec::TxnLimits::default(),
            initial,
            creek_procs::versions::meta_key,
            (1..).zip(calls.iter().copied()),
        );
        for (call, outcome) in calls.iter().zip(results) {
            if call.name.as_ref() != RUN {
                continue;
            }
            if let Ok(mpo) = MpoCall::decode(&call.args) {
                let seen = outcomes.entry(mpo.id).or_default();
                if !seen.iter().any(|(t, _)| *t == s) {
                    seen.push((s, outcome));
                }
            }
        }
    }
    outcomes
        .into_iter()
        .filter(|(_, seen)| seen.windows(2).any(|w| w[0].1 != w[1].1))
        .map(|(mpo, seen)| format!("{mpo} ended differently on its shards: {seen:?}"))
        .take(20)
        .collect()
}

/// No shard ran an op on keys it does not own: every op a client invoked
/// went to a replica of the shard owning its keys, and every op a replica
/// committed is owned by the replica's shard. Ops naming no key (setup
/// definitions sent to every shard, a replica's own session expiries) are
/// the shard's own.
pub fn ownership_violations(out: &Outcome) -> Vec<String> {
    let workload: &dyn Workload = out.workload.as_ref();
    let shard_of_slot = |i: usize| i / out.per_shard;
    // With moves, an op may run on any shard that owned its keys in one
    // of the maps the directory held meanwhile (the check at execution
    // refuses it where the shard's own state says otherwise; linearizability
    // across the cluster judges the rest).
    let seed = [out.map.clone()];
    let maps: &[Arc<ShardMap>] = if out.move_maps.is_empty() {
        &seed
    } else {
        &out.move_maps
    };
    let owner = |call: &creek_types::ProcCall, shard: usize| {
        let keys = workload.route_keys(call);
        let route = |map: &ShardMap| {
            map.route(keys.iter().map(|(ks, k)| (ks.as_deref(), &k[..])))
                .map(|s| usize::from(s.0))
        };
        maps.iter()
            .map(|m| route(m))
            .find(|r| *r == Ok(shard))
            .unwrap_or_else(|| route(&maps[0]))
    };
    let mut violations = Vec::new();
    // No shard's data holds a key another shard owns (an operation across
    // shards installs only the writes of the keys its shard owns).
    for s in 0..out.shard_groups() {
        for i in out
            .shard_slots(s)
            .filter(|&i| out.members[i] && out.nodes[i].is_up())
        {
            let owner = |k: &Bytes| {
                workload
                    .record_route(k)
                    .map(|(ks, k)| usize::from(out.final_map.owner(ks.as_deref(), &k).0))
            };
            let foreign = out.nodes[i].committed_state().into_keys().find_map(|k| {
                let user = k.first() != Some(&creek_procs::registry::INTERNAL_KEY_PREFIX);
                owner(&k).filter(|t| user && *t != s).map(|t| (k, t))
            });
            if let Some((k, t)) = foreign {
                violations.push(format!(
                    "replica {i} of shard {s} holds key {:?}, which shard {t} owns",
                    String::from_utf8_lossy(&k)
                ));
            }
        }
    }
    // A replica's own ops (session expiries, voids of ops that cannot
    // commit) belong to its shard whatever their arguments hold.
    let own = |call: &creek_types::ProcCall| {
        [creek_procs::session::EXPIRE, creek_procs::void::VOID].contains(&&*call.name)
    };
    let mut judge =
        |what: String, call: &creek_types::ProcCall, shard: usize| match owner(call, shard) {
            _ if own(call) => {}
            // A shard's copy of an operation across shards runs on a shard it
            // involves.
            _ if call.name.as_ref() == creek_procs::mpo::RUN => {
                match creek_procs::mpo::MpoCall::decode(&call.args) {
                    Ok(mpo) if mpo.parts.iter().any(|p| p.shard as usize == shard) => {}
                    Ok(mpo) => violations.push(format!(
                        "{what} ({}, {}) ran on shard {shard}, which it does not involve",
                        call.name, mpo.id
                    )),
                    Err(_) => {}
                }
            }
            Ok(s) if s != shard => violations.push(format!(
                "{what} ({}) ran on shard {shard}; shard {s} owns its keys",
                call.name
            )),
            Err(RouteError::Spans { shards }) => violations.push(format!(
                "{what} ({}) ran on shard {shard}; its keys span shards {shards:?}",
                call.name
            )),
            _ => {}
        };
    for r in &out.history.ops {
        let what = match r.id {
            Some(id) => format!("op {id} invoked at replica {}", r.replica),
            None => format!("a local read at replica {}", r.replica),
        };
        judge(what, &r.call, shard_of_slot(r.replica));
    }
    // The shards' replicas (the directory's run only `directory.*`).
    let shard_slots = out.shard_groups() * out.per_shard;
    for (i, node) in out.nodes[..shard_slots].iter().enumerate() {
        for id in node.committed() {
            if let Some(op) = out.ops.get(id) {
                judge(
                    format!("op {id} committed at replica {i}"),
                    &op.call,
                    shard_of_slot(i),
                );
            }
        }
    }
    violations
}

/// Stable times (docs/snapshot-reads.md), when the run had them: how far
/// the global stable time lagged the virtual clock (sampled every tick, per
/// shard), the visibility latency of strong ops (from the client's final
/// view, which follows the commit by a hop, to the first moment a replica
/// of the op's shard knew a global stable time at or past the op's commit
/// time), and the stable-time bytes per op.
fn stable_report(cfg: &SimConfig, out: &Outcome) -> Value {
    if cfg.stable_every_us == 0 {
        return Value::Null;
    }
    let mut visibility = Vec::new();
    for r in &out.history.ops {
        let Some(f) = r.final_view().filter(|f| r.strong && f.time != 0) else {
            continue;
        };
        let Some(seen) = out.stable.global.get(r.replica / out.per_shard) else {
            continue;
        };
        let at = seen.partition_point(|(_, g)| *g < f.time);
        if let Some((when, _)) = seen.get(at) {
            visibility.push(when.saturating_sub(f.at_us));
        }
    }
    let ops = out.history.ops.len().max(1) as f64;
    json!({
        "every_us": cfg.stable_every_us,
        "lag_us": crate::bench::percentiles(out.stable.lag_us.clone()),
        "visibility_us": crate::bench::percentiles(visibility),
        "bytes": out.traffic.stable_bytes,
        "bytes_per_op": out.traffic.stable_bytes as f64 / ops,
    })
}

/// The JSON report of one run.
pub fn report(cfg: &SimConfig, out: &Outcome, checks: &[Check]) -> Value {
    let h = &out.history.ops;
    let strong = h.iter().filter(|r| r.strong).count();
    let local = h.iter().filter(|r| r.id.is_none()).count();
    let weak = h.len() - strong;
    let mut tentative = Vec::new();
    let mut stable = Vec::new();
    let mut snapshot = Vec::new();
    let mut completed = 0u64;
    // Operations across shards apart from the strong ops of one shard.
    let (mut mpo_stable, mut single_stable) = (Vec::new(), Vec::new());
    let mpos = h
        .iter()
        .filter(|r| r.call.name.as_ref() == creek_procs::mpo::RUN)
        .count();
    for r in h {
        if let Some(v) = r.first_tentative() {
            tentative.push(v.at_us - r.invoked_at_us);
        }
        if let Some(v) = r.views.iter().find(|v| v.kind == ViewKind::Snapshot) {
            snapshot.push(v.at_us - r.invoked_at_us);
        }
        if let Some(v) = r.final_view() {
            if r.strong {
                stable.push(v.at_us - r.invoked_at_us);
                if r.call.name.as_ref() == creek_procs::mpo::RUN {
                    mpo_stable.push(v.at_us - r.invoked_at_us);
                } else {
                    single_stable.push(v.at_us - r.invoked_at_us);
                }
            }
        }
        let done = if r.wants_final {
            r.final_view().is_some()
        } else {
            !r.views.is_empty()
        };
        completed += u64::from(done);
    }
    let mut ops_by_shard = vec![0u64; cfg.shards];
    for r in h {
        ops_by_shard[r.replica / out.per_shard] += 1;
    }
    let mut counts = crate::replica::ReplicaCounts::default();
    for n in &out.nodes {
        counts += n.counts();
    }
    let (hits, checked) = (counts.accuracy_hits, counts.accuracy_checked);
    let (executions, inserted) = (counts.executions, counts.ops);
    let replicated = h.iter().filter(|r| r.id.is_some()).count().max(1);
    let mut disk = crate::replica::DiskCounts::default();
    let mut transfers = creek_node::TransferStats::default();
    for n in &out.nodes {
        disk += n.disk_counts();
        transfers += n.transfers();
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
        "shards": cfg.shards,
        "cores": cfg.cores,
        "duration_us": out.duration_us,
        "ops": {
            "total": h.len(),
            "weak": weak,
            "strong": strong,
            "local_reads": local,
            "snapshot_views": snapshot.len(),
        },
        "ops_by_shard": ops_by_shard,
        "directory": out.directory.as_ref().map(|d| json!({
            "epoch": d.epoch,
            "operator_ops": d.history.ops.len(),
        })),
        "faults": out.faults,
        "moves": moves::report(out),
        "checks": checks_obj,
        "violations": violations,
        "notes": checks.iter().filter_map(|c| c.note.clone()).collect::<Vec<_>>(),
        "accuracy": if checked == 0 { json!(null) } else { json!(hits as f64 / checked as f64) },
        "execution_ratio": if inserted == 0 { json!(null) } else { json!(executions as f64 / inserted as f64) },
        "latency_us": {
            "tentative": crate::bench::percentiles(tentative),
            "stable": crate::bench::percentiles(stable),
            "snapshot": crate::bench::percentiles(snapshot),
            "mpo_stable": crate::bench::percentiles(mpo_stable),
            "single_shard_strong_stable": crate::bench::percentiles(single_stable),
        },
        "stable": stable_report(cfg, out),
        "mpo_share": if h.is_empty() { json!(null) } else { json!(mpos as f64 / h.len() as f64) },
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
        "state_transfers": {
            "installed": transfers.installed,
            "bytes": transfers.bytes_received,
            "past_held": transfers.past_held,
            "restarts": transfers.restarts,
        },
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
            "wal_folds": disk.wal_folds,
        },
        "plant_bug": cfg.plant_bug.map(|b| format!("{b:?}")),
        "trace_hash": format!("{:016x}", out.trace_hash),
    })
}

/// Run one simulation end to end: build, run, check, report.
pub fn simulate(cfg: &SimConfig) -> Result<(Value, bool), String> {
    let config = crate::workload::WorkloadConfig {
        cross_shard: cfg.cross_shard,
        ranges: cfg.shards <= 1,
        txns: cfg.shards <= 1 || cfg.cross_shard > 0.0,
        leases: cfg.shards <= 1,
        ..crate::workload::WorkloadConfig::default()
    };
    let workload = crate::workload::by_name(&cfg.workload, &config)?;
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
