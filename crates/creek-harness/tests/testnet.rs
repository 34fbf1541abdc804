//! Gossip and CAB together under faults (issue 3): 3- and 5-replica groups on
//! a lossy, duplicating, reordering network, through leader crashes,
//! partitions, heals and restarts from storage. Checked after healing:
//! uniform total order of CAB deliveries (identical committed lists), every
//! delivered strong op had its causal context committed before it, no decided
//! id lost, every op delivered everywhere, no frame refused.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use creek_core::{OpId, Request, Views};
use creek_harness::testnet::{NetConfig, TestNet};
use creek_rng::Rng;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

fn call(rng: &mut Rng) -> ProcCall {
    let key = Value::from(format!("k{}", rng.range(0, 4)).as_str());
    match rng.range(0, 2) {
        0 => ProcCall::new("kv.incr", encode_args(&[key, Value::Int(1)])),
        1 => ProcCall::new("kv.put", encode_args(&[key, Value::from("v")])),
        _ => ProcCall::new(
            "queue.enqueue",
            encode_args(&[Value::from("q"), Value::from("t")]),
        ),
    }
}

/// The whole-run checks.
fn check(net: &TestNet, label: &str) {
    assert_eq!(net.refused, 0, "{label}: a frame was refused");
    let lists = net.committed_lists();
    let (_, canonical) = lists.first().cloned().unwrap();
    for (i, list) in &lists {
        if list != &canonical {
            let at = list.iter().zip(&canonical).position(|(a, b)| a != b);
            panic!(
                "{label}: node {i} committed a different order: lengths {} vs {}, first difference at {at:?}",
                list.len(),
                canonical.len()
            );
        }
    }
    let unique: BTreeSet<OpId> = canonical.iter().copied().collect();
    assert_eq!(
        unique.len(),
        canonical.len(),
        "{label}: an op committed twice"
    );
    // Every op ever broadcast is delivered (and committed) everywhere.
    for id in net.ops.keys() {
        assert!(unique.contains(id), "{label}: {id} never committed");
    }
    // No decided id lost: whatever any node ever committed survives.
    for (_, id) in net.committed_at.keys() {
        assert!(
            unique.contains(id),
            "{label}: {id} was committed somewhere, then lost"
        );
    }
    // Seqs a restarted replica reserved and never issued are voided by the
    // committed order (a void op lists them): contexts may name them.
    let mut voided = BTreeSet::new();
    for op in net.ops.values() {
        if &*op.call.name == creek_procs::void::VOID && unique.contains(&op.id) {
            for seq in creek_procs::void::void_seqs(&op.call.args).unwrap_or_default() {
                voided.insert(OpId {
                    origin: op.id.origin,
                    seq,
                });
            }
        }
    }
    // Conditional delivery: a strong op's causal context is committed before it.
    let position = |id: &OpId| canonical.iter().position(|x| x == id);
    for id in &canonical {
        let Some(op) = net.ops.get(id) else { continue };
        if let Some(ctx) = &op.causal_context {
            let at = position(id).unwrap();
            for dep in ctx.iter().filter(|d| !voided.contains(d)) {
                let dep_at = position(&dep).unwrap_or(usize::MAX);
                assert!(
                    dep_at < at,
                    "{label}: {id} committed before its context {dep}"
                );
            }
        }
    }
    for i in 0..net.len() {
        let n = net.node(i).unwrap();
        assert!(
            n.replica().tentative_len() == 0,
            "{label}: node {i} has tentative ops"
        );
        assert_eq!(
            n.cab().decided_waiting(),
            0,
            "{label}: node {i} has undelivered ids"
        );
    }
}

fn run_scenario(n: usize, seed: u64, faults: bool) -> TestNet {
    let net_config = NetConfig {
        latency_us: (200, 3_000),
        loss: if faults { 0.05 } else { 0.0 },
        duplicate: if faults { 0.02 } else { 0.0 },
        tick_us: 1_000,
        seed,
    };
    let mut net = TestNet::new(n, net_config, |c| c.replica.stabilize_after_us = 20_000);
    let mut rng = Rng::new(seed ^ 0xC0FFEE);
    let mut crashed = None;
    for step in 0..400u64 {
        net.run_for(5_000);
        let t = step * 5;
        if faults {
            match t {
                300 => {
                    // Crash the leader (or anyone, before one is elected).
                    let victim = net.leader().unwrap_or(0);
                    net.crash(victim);
                    crashed = Some(victim);
                }
                700 => net.partition(&[n - 1]),
                1_000 => net.heal(),
                1_300 => {
                    if let Some(v) = crashed.take() {
                        net.restart(v);
                    }
                }
                1_500 => net.partition(&[0, 1]),
                1_700 => net.heal(),
                _ => {}
            }
        }
        let at = rng.range(0, n as u64 - 1) as usize;
        let strong = rng.chance(0.4);
        let request = Request {
            call: call(&mut rng),
            strong,
            views: if strong { Views::BOTH } else { Views::WEAK },
            read_time: 0,
            read_exact: false,
            read_revision: None,
        };
        net.invoke(at, request);
    }
    net.heal();
    if let Some(v) = crashed {
        net.restart(v);
    }
    net.run_for(5_000_000);
    net
}

#[test]
fn three_and_five_replicas_agree_under_faults() {
    for n in [3, 5] {
        for seed in 0..20 {
            let net = run_scenario(n, seed, true);
            check(&net, &format!("n={n} seed={seed}"));
            assert!(net.ops.len() > 300, "n={n} seed={seed}: workload too small");
        }
    }
}

#[test]
fn fault_free_runs_answer_every_strong_op_stably() {
    for n in [3, 5] {
        let net = run_scenario(n, 42, false);
        check(&net, &format!("n={n} fault-free"));
        let strong: Vec<&OpId> = net
            .invoked_at
            .keys()
            .filter(|id| net.ops[id].strong)
            .collect();
        assert!(!strong.is_empty());
        for id in strong {
            let finals = net
                .views
                .iter()
                .filter(|(_, _, v)| v.handle == creek_core::ExecKey::Op(*id) && v.kind.is_final())
                .count();
            assert_eq!(finals, 1, "strong {id} got {finals} final views");
        }
    }
}

#[test]
fn same_seed_same_run() {
    let a = run_scenario(3, 7, true);
    let b = run_scenario(3, 7, true);
    assert_eq!(a.committed_lists(), b.committed_lists());
    assert_eq!(a.traffic, b.traffic);
}

/// Creek paper §3.2 (CAB): a strong op whose causal context is still in
/// flight to a replica when its id is decided. That replica holds the append
/// back, pulls the missing ops by gossip from a third replica, then delivers
/// the context and the op, in order.
#[test]
fn delivery_waits_for_a_causal_context_in_flight() {
    let mut net = TestNet::new(3, NetConfig::default(), |c| {
        c.replica.stabilize_after_us = 0
    });
    net.node_mut(1).unwrap().campaign();
    net.run_for(20_000);
    assert_eq!(net.leader(), Some(1), "node 1 should lead");
    // Node 0 cannot reach node 2: its weak op and strong op travel to node 2
    // only through node 1.
    net.block(0, 2);
    let put = |v: &str| ProcCall::new("kv.put", encode_args(&[Value::from("k"), Value::from(v)]));
    net.invoke(0, Request::weak(put("w")));
    net.invoke(0, Request::strong(put("s")));
    let w = creek_core::OpId {
        origin: creek_core::ReplicaId(1),
        seq: 1,
    };
    let s = creek_core::OpId {
        origin: creek_core::ReplicaId(1),
        seq: 2,
    };
    // Decided by nodes 0 and 1 (a majority) quickly.
    net.run_for(3_000);
    assert!(net.node(1).unwrap().replica().committed().contains(&s));
    // Node 2 eventually gets the ops from node 1 (gossip pull or anti-entropy)
    // and delivers w before s.
    net.run_for(100_000);
    let c2 = net.node(2).unwrap().replica().committed().to_vec();
    assert_eq!(
        c2,
        vec![w, s],
        "node 2 delivers the context, then the strong op"
    );
    assert_eq!(net.node(2).unwrap().replica().decided_waiting(), 0);
    check(&net, "context in flight");
}

/// Leader change with ids in flight: ids cast at a follower whose leader
/// crashes before deciding them are decided exactly once by the next leader.
#[test]
fn ids_in_flight_survive_a_leader_crash() {
    let mut net = TestNet::new(5, NetConfig::default(), |c| {
        c.replica.stabilize_after_us = 5_000
    });
    net.node_mut(0).unwrap().campaign();
    net.run_for(20_000);
    assert_eq!(net.leader(), Some(0));
    // Cut the leader off, cast strong ops at a follower, then crash the leader.
    net.isolate(0);
    let incr = ProcCall::new("kv.incr", encode_args(&[Value::from("n"), Value::Int(1)]));
    for _ in 0..5 {
        net.invoke(3, Request::strong(incr.clone()));
    }
    net.run_for(1_000);
    net.crash(0);
    net.heal();
    net.run_for(200_000);
    net.restart(0);
    net.run_for(2_000_000);
    check(&net, "leader crash");
    let finals: Vec<_> = net
        .views
        .iter()
        .filter(|(i, _, v)| *i == 3 && v.kind.is_final())
        .collect();
    assert_eq!(finals.len(), 5, "every strong op answered stably once");
    let state = net.node(2).unwrap().replica().committed_state();
    assert_eq!(
        state
            .get(&bytes::Bytes::from_static(b"n"))
            .map(|v| v.as_ref()),
        Some(&b"5"[..])
    );
}
