//! Made-up points and a run for the tests of the summary, the targets and
//! the report.

use creek_exec::mvcc::Schedule;
use creek_sim::config::Protocol;
use serde_json::{json, Map, Value as Json};

use super::run::{Mode, Point, Run};
use super::variations::{Variation, PROTOCOLS, VARIATIONS};

/// Figure 1's variation.
pub(super) fn fig1() -> Variation {
    VARIATIONS[0]
}

fn series(mean: f64) -> Json {
    json!({"p50": mean, "p90": mean, "p99": mean * 2.0, "max": mean * 3.0, "mean": mean, "count": 10})
}

/// A point as the simulator would give it, with made-up numbers.
pub(super) fn point(protocol: Protocol, rate: f64, throughput: f64, half_peak: bool) -> Point {
    let latency = json!({
        "weak_tentative": series(rate / 100.0),
        "weak_final": null,
        "strong_tentative": series(rate / 200.0),
        "strong_stable": series(rate / 50.0),
        "response": series(rate / 10.0),
    });
    let mut p = Map::new();
    p.insert("protocol".into(), json!(protocol.name()));
    p.insert("label".into(), json!("fig1"));
    p.insert(
        "point".into(),
        json!(if half_peak { "half_peak" } else { "sweep" }),
    );
    p.insert("offered_rate".into(), json!(rate));
    p.insert("throughput_ops_per_sec".into(), json!(throughput));
    p.insert("latency_us".into(), latency);
    p.insert("accuracy".into(), json!(0.995));
    p.insert("execution_ratio".into(), json!(1.02));
    p.insert("cpu_busy".into(), json!(0.5));
    p.insert(
        "bytes".into(),
        json!({"consensus": 1, "gossip": 2, "per_op": 300.0}),
    );
    p.insert("consistency_ok".into(), json!(true));
    p.insert("settled".into(), json!(true));
    p
}

/// Creek peaks at 25k (offered 30k, overloaded beyond); archie at
/// 28k; smr and bayou at 2.7k.
pub(super) fn sweep() -> Vec<Point> {
    let mut v = vec![
        point(Protocol::Creek, 10e3, 9_900.0, false),
        point(Protocol::Creek, 20e3, 19_800.0, false),
        point(Protocol::Creek, 30e3, 25_000.0, false),
        point(Protocol::Creek, 40e3, 24_000.0, false),
        point(Protocol::Archie, 10e3, 9_950.0, false),
        point(Protocol::Archie, 30e3, 28_000.0, false),
    ];
    for p in [Protocol::Smr, Protocol::Bayou] {
        v.push(point(p, 1e3, 1_000.0, false));
        v.push(point(p, 2e3, 2_000.0, false));
        v.push(point(p, 3e3, 2_700.0, false));
        v.push(point(p, 3.5e3, 2_650.0, false));
    }
    v
}

/// A full run of Figure 1 (nothing is simulated from it).
pub(super) fn run() -> Run {
    Run {
        mode: Mode::Full,
        seed: 1,
        jobs: 1,
        variations: vec![fig1()],
        protocols: PROTOCOLS.to_vec(),
        rates: None,
        schedule: Schedule::default(),
        out: None,
    }
}
