//! The baselines (SMR, Bayou, Archie) under the simulator's checkers: every
//! run of each protocol passes them, with and without faults, and each
//! protocol answers the way it is defined to.
#![allow(clippy::unwrap_used)]

use creek_sim::config::{Faults, Protocol, SimConfig};
use creek_sim::report::{report, run_checks};
use creek_sim::sim::Sim;
use creek_sim::workload::{by_name, WorkloadConfig};

fn run(protocol: Protocol, workload: &str, seed: u64, faults: Faults) -> serde_json::Value {
    let cfg = SimConfig {
        protocol,
        seed,
        workload: workload.into(),
        duration_us: 1_000_000,
        faults,
        ..SimConfig::default()
    };
    let w = by_name(workload, &WorkloadConfig::default()).unwrap();
    let out = Sim::new(cfg.clone(), w).unwrap().run();
    let checks = run_checks(&cfg, &out);
    let failed: Vec<_> = checks.iter().filter(|c| !c.ok).collect();
    assert!(
        failed.is_empty(),
        "{} {workload} seed {seed}: {failed:?}",
        protocol.name()
    );
    report(&cfg, &out, &checks)
}

#[test]
fn every_baseline_passes_the_checkers_without_faults() {
    for protocol in [Protocol::Smr, Protocol::Bayou, Protocol::Archie] {
        for workload in ["kv", "bank", "queue"] {
            let r = run(protocol, workload, 1, Faults::default());
            assert!(r["ops"]["total"].as_u64().unwrap() > 100, "{r}");
            // SMR and Archie answer once, after final delivery; Bayou
            // answers weak ops after their first execution. SMR does not
            // speculate; Bayou and Archie measure their speculation.
            let tentative = !r["latency_us"]["tentative"].is_null();
            assert_eq!(tentative, protocol == Protocol::Bayou, "{r}");
            assert_eq!(r["accuracy"].is_null(), protocol == Protocol::Smr, "{r}");
        }
    }
}

#[test]
fn every_baseline_passes_the_checkers_under_all_faults() {
    let all = Faults::parse("all").unwrap();
    for protocol in [Protocol::Smr, Protocol::Bayou, Protocol::Archie] {
        for seed in 1..=4 {
            run(protocol, "bank", seed, all);
        }
    }
}

#[test]
fn planted_bugs_are_refused_for_baselines() {
    let cfg = SimConfig {
        protocol: Protocol::Archie,
        plant_bug: Some(creek_sim::config::PlantedBug::SkipInvalidation),
        ..SimConfig::default()
    };
    let err = cfg.validate().unwrap_err();
    assert!(err.contains("--protocol creek"), "{err}");
}
