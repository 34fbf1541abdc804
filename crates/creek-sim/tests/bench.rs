//! The benchmark measurements on simulated runs: a point reports what the
//! run did (throughput near the offered rate, every latency series, CPU,
//! counters, setup calls left out) and a preloaded TPC-C run passes every
//! checker. (That the consistency conditions catch corrupted states is
//! tested in creek-workloads' tests/tpcc/consistency.rs.)
#![allow(clippy::unwrap_used)]

use creek_sim::bench::sim_point;
use creek_sim::config::SimConfig;
use creek_sim::report::run_checks;
use creek_sim::sim::Sim;
use creek_sim::workload::{by_name, WorkloadConfig};

fn bench_config(workload: &str, rate: f64) -> SimConfig {
    SimConfig {
        replicas: 5,
        cores: 8,
        workload: workload.into(),
        duration_us: 600_000,
        warmup_us: 200_000,
        clients: 0,
        open_rate_per_sec: rate,
        weak_answer_on_preliminary: true,
        ..SimConfig::default()
    }
}

#[test]
fn an_open_loop_point_measures_the_window_after_the_warm_up() {
    let cfg = bench_config("ycsb", 4_000.0);
    let config = WorkloadConfig {
        final_share: 1.0,
        ..WorkloadConfig::default()
    };
    let w = by_name("ycsb", &config).unwrap();
    let out = Sim::new(cfg.clone(), w).unwrap().run();
    let p = sim_point(&out, cfg.replicas, cfg.cores);
    let tput = p["throughput_ops_per_sec"].as_f64().unwrap();
    assert!((3_000.0..5_000.0).contains(&tput), "{p:?}");
    let measured = p["ops"]["measured"].as_u64().unwrap();
    // 0.4 s at 4,000/s: the warm-up's ops are not counted.
    assert!((1_200..2_000).contains(&measured), "{p:?}");
    for series in [
        "weak_tentative",
        "weak_final",
        "strong_tentative",
        "strong_stable",
    ] {
        let s = &p["latency_us"][series];
        assert!(s["count"].as_u64().unwrap() > 0, "{series}: {p:?}");
        assert!(s["p50"].as_u64().unwrap() <= s["p99"].as_u64().unwrap());
    }
    // Strong stable views need a consensus round: at least two link delays.
    assert!(p["latency_us"]["strong_stable"]["p50"].as_u64().unwrap() >= 400);
    let cpu = p["cpu_busy"].as_f64().unwrap();
    assert!(cpu > 0.0 && cpu < 1.0, "{p:?}");
    assert!(p["accuracy"].as_f64().unwrap() > 0.5);
    assert!(p["execution_ratio"].as_f64().unwrap() >= 1.0);
    assert!(p["divergence"].as_f64().is_some());
    assert_eq!(p["consistency_ok"], true);
}

#[test]
fn preloaded_tpcc_passes_every_check() {
    let cfg = bench_config("tpcc", 1_500.0);
    let config = WorkloadConfig {
        preload: true,
        final_share: 1.0,
        ..WorkloadConfig::default()
    };
    let out = Sim::new(cfg.clone(), by_name("tpcc", &config).unwrap())
        .unwrap()
        .run();
    assert!(out.preloaded);
    for c in run_checks(&cfg, &out) {
        assert!(c.ok, "{}: {:?}", c.name, c.violations);
    }
    let p = sim_point(&out, cfg.replicas, cfg.cores);
    assert!(p["ops"]["strong"].as_u64().unwrap() > 100, "{p:?}");
    assert_eq!(p["consistency_ok"], true);
}

#[test]
fn tickets_are_never_oversold_and_promises_hold_without_faults() {
    // No warm-up: the stock runs out within the run.
    let cfg = SimConfig {
        clients: 12,
        open_rate_per_sec: 0.0,
        warmup_us: 0,
        ..bench_config("tickets", 0.0)
    };
    let config = WorkloadConfig {
        events: 2,
        tickets: 1_000,
        ticket_threshold: 20,
        ..WorkloadConfig::default()
    };
    let out = Sim::new(cfg.clone(), by_name("tickets", &config).unwrap())
        .unwrap()
        .run();
    for c in run_checks(&cfg, &out) {
        assert!(c.ok, "{}: {:?}", c.name, c.violations);
    }
    let p = sim_point(&out, cfg.replicas, cfg.cores);
    // The 2,000 setup enqueues are neither measured nor counted as done.
    let purchases = out.history.ops.iter().filter(|op| !op.is_setup()).count();
    assert_eq!(out.history.ops.len() - purchases, 2_000);
    assert_eq!(p["ops"]["measured"].as_u64().unwrap() as usize, purchases);
    let tput = p["throughput_ops_per_sec"].as_f64().unwrap();
    assert!(tput <= purchases as f64 / 0.6 + 1.0, "{p:?}");
    assert!(p["decided_on_preliminary"].as_u64().unwrap() > 0, "{p:?}");
    assert!(p["sold_out_answers"].as_u64().unwrap() > 0, "{p:?}");
    assert_eq!(p["oversold_promises"], 0, "{p:?}");
}
