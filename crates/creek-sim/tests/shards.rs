//! Sharded clusters in the simulator: several groups, clients routed by the
//! shard map, faults per shard, the checkers per shard and the ownership
//! check (no shard runs an op on keys it does not own).
#![allow(clippy::unwrap_used)]

use creek_sim::config::{Faults, Protocol, SimConfig};
use creek_sim::report::{ownership_violations, run_checks, simulate};
use creek_sim::sim::Sim;
use creek_sim::workload::{by_name, WorkloadConfig};

fn config(workload: &str, seed: u64) -> SimConfig {
    SimConfig {
        replicas: 3,
        shards: 2,
        cores: 4,
        clients: 8,
        workload: workload.into(),
        duration_us: 300_000,
        faults: Faults::parse("all").unwrap(),
        seed,
        ..SimConfig::default()
    }
}

#[test]
fn sharded_runs_with_all_faults_pass_every_check() {
    for workload in ["kv", "bank", "procs", "ycsb"] {
        for seed in 0..2 {
            let (report, ok) = simulate(&config(workload, seed)).unwrap();
            assert!(ok, "{workload} seed {seed}: {}", report["violations"]);
            assert_eq!(report["checks"]["ownership"], true, "{workload}");
            assert!(
                report["faults"].get("route_refused").is_none(),
                "{workload} seed {seed}: ops no shard owns alone: {}",
                report["faults"]
            );
            let by_shard = report["ops_by_shard"].as_array().unwrap();
            assert_eq!(by_shard.len(), 2);
            assert!(
                by_shard.iter().all(|n| n.as_u64().unwrap() > 0),
                "{workload} seed {seed}: a shard saw no op: {by_shard:?}"
            );
        }
    }
}

#[test]
fn sharded_tpcc_keeps_each_warehouse_on_its_shard() {
    let cfg = SimConfig {
        faults: Faults::default(),
        ..config("tpcc", 3)
    };
    let (report, ok) = simulate(&cfg).unwrap();
    assert!(ok, "{}", report["violations"]);
    assert_eq!(report["checks"]["ownership"], true);
    assert!(report["faults"].get("route_refused").is_none());
}

/// The ownership check can fail: an op moved to a replica of the other
/// shard is reported.
#[test]
fn an_op_run_by_the_wrong_shard_is_caught() {
    let cfg = SimConfig {
        faults: Faults::default(),
        ..config("kv", 5)
    };
    let workload = by_name("kv", &WorkloadConfig::default()).unwrap();
    let mut out = Sim::new(cfg.clone(), workload).unwrap().run();
    assert!(ownership_violations(&out).is_empty());
    let per_shard = out.per_shard;
    let moved = out
        .history
        .ops
        .iter_mut()
        .find(|r| !r.is_setup() && r.replica < per_shard)
        .unwrap();
    moved.replica += per_shard;
    let violations = ownership_violations(&out);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].contains("shard 0 owns its keys"),
        "{violations:?}"
    );
    let checks = run_checks(&cfg, &out);
    let ownership = checks.iter().find(|c| c.name == "ownership").unwrap();
    assert!(!ownership.ok);
}

#[test]
fn settings_a_sharded_run_cannot_take_are_refused() {
    for (cfg, why) in [
        (
            SimConfig {
                shards: 0,
                ..config("kv", 1)
            },
            "shards must be between",
        ),
        (
            SimConfig {
                shards: 17,
                ..config("kv", 1)
            },
            "shards must be between",
        ),
        (
            SimConfig {
                protocol: Protocol::Smr,
                ..config("kv", 1)
            },
            "sharded runs run Creek's protocol",
        ),
        (
            // The small TPC-C database has two warehouses.
            SimConfig {
                shards: 3,
                ..config("tpcc", 1)
            },
            "needs at least as many warehouses",
        ),
    ] {
        let err = simulate(&cfg).err().unwrap();
        assert!(err.contains(why), "{err}");
    }
}
