//! The `procs` workload (user procedures registered at run time, called
//! weak and strong, with scans) in the simulator under every fault class:
//! every checker passes, and a planted bug in a registered procedure is
//! caught. The CI swarm runs more seeds (`scripts/swarm.sh`).
#![allow(clippy::unwrap_used)]

use creek_sim::config::{Faults, SimConfig};
use creek_sim::report::{run_checks, simulate};
use creek_sim::sim::Sim;
use creek_sim::workload::procs::ProcsWorkload;
use creek_sim::workload::WorkloadConfig;

fn config(seed: u64) -> SimConfig {
    SimConfig {
        replicas: 5,
        cores: 4,
        clients: 12,
        workload: "procs".into(),
        duration_us: 400_000,
        faults: Faults::parse("all").unwrap(),
        seed,
        ..SimConfig::default()
    }
}

#[test]
fn procs_with_all_faults_passes_every_check() {
    for seed in 0..4 {
        let (report, ok) = simulate(&config(seed)).unwrap();
        assert!(ok, "procs seed {seed}: {}", report["violations"]);
        let ops = &report["ops"];
        assert!(
            ops["strong"].as_u64().unwrap() > 50 && ops["weak"].as_u64().unwrap() > 50,
            "procs seed {seed}: too few ops: {ops}"
        );
        let lin = report["notes"].to_string();
        assert!(
            lin.contains("linearizable: ") && !lin.contains("inconclusive"),
            "procs seed {seed}: the strong calls were not checked: {lin}"
        );
    }
}

/// A `post` that reaches only the first member of its group, registered
/// instead of the example's: the workload's check finds posts that missed
/// members who joined before them.
#[test]
fn procs_planted_bug_is_caught() {
    let caught = (0..4).any(|seed| {
        let cfg = SimConfig {
            faults: Faults::parse("partition,loss,clock").unwrap(),
            ..config(seed)
        };
        let w = ProcsWorkload::with_planted_bug(&WorkloadConfig::default());
        let out = Sim::new(cfg.clone(), Box::new(w)).unwrap().run();
        let checks = run_checks(&cfg, &out);
        let workload = checks.iter().find(|c| c.name == "workload").unwrap();
        !workload.ok && workload.violations.iter().any(|v| v.contains("missed"))
    });
    assert!(caught, "the planted bug went unnoticed in 4 seeds");
}

/// A sweep with the CI swarm's LAN settings (5 replicas, 20 clients,
/// 500 ms, every fault class), for seeds `PROCS_SEEDS` (`A..B`, default
/// `1000..1010`); prints one line per seed and the violations of each
/// failure (`PROCS_FAULTS`, `PROCS_WORKLOAD` change the faults and the
/// workload). `cargo test -p creek-sim --test procs -- --ignored --nocapture`.
#[test]
#[ignore]
fn procs_seed_sweep() {
    let range = std::env::var("PROCS_SEEDS").unwrap_or_else(|_| "1000..1010".into());
    let (a, b) = range.split_once("..").unwrap();
    let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
    let faults = std::env::var("PROCS_FAULTS").unwrap_or_else(|_| "all".into());
    let workload = std::env::var("PROCS_WORKLOAD").unwrap_or_else(|_| "procs".into());
    let mut failed = Vec::new();
    for seed in a..b {
        let cfg = SimConfig {
            clients: 20,
            duration_us: 500_000,
            faults: Faults::parse(&faults).unwrap(),
            workload: workload.clone(),
            ..config(seed)
        };
        let (report, ok) = simulate(&cfg).unwrap();
        println!(
            "seed {seed}: {} ops={} notes={}",
            if ok { "ok  " } else { "FAIL" },
            report["ops"],
            report["notes"]
        );
        if !ok {
            println!("  {}", report["violations"]);
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "failed seeds: {failed:?}");
}
