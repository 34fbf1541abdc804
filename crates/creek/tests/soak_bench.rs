//! End-to-end: `creek bench soak` for a quarter of a minute starts a real
//! cluster, drives YCSB-A through it, samples every replica and reports one
//! JSON object whose start sample respects the warm-up (docs/bench/soak.md).
//! The command cleans up its own servers; the test bounds its wait.

mod common;

use common::number;
use std::time::Duration;

/// Far beyond the run (15 s of load, setup and teardown): only a hang hits it.
const LIMIT: Duration = Duration::from_secs(180);

#[test]
fn a_short_soak_reports_samples_and_growth_over_the_replicas() {
    let r = common::run_json_command(
        &[
            "bench",
            "soak",
            "--minutes",
            "0.25",
            "--warmup-secs",
            "5",
            "--sample-secs",
            "2",
            "--json",
        ],
        LIMIT,
    );

    assert_eq!(r["bench"], "soak");
    assert_eq!(r["minutes"], 0.25);
    assert_eq!(number(&r, "replicas"), 3.0);
    assert!(number(&r, "ops") > 0.0, "{r}");
    for key in [
        "rss_bytes_start",
        "rss_bytes_end",
        "disk_bytes_start",
        "disk_bytes_end",
    ] {
        assert!(number(&r, key) > 0.0, "{key} in {r}");
    }
    for key in ["rss_growth", "disk_growth"] {
        assert!(r[key].as_f64().is_some_and(|g| g > 0.0), "{key} in {r}");
    }

    // A sample at 0, every 2 s, and at the end (15 s).
    let samples = r["samples"].as_array().expect("samples");
    assert!(samples.len() >= 6, "{} samples", samples.len());
    // 30% of the ops are strong: their ids went through the consensus log
    // (which a checkpoint may compact, so any sample will do).
    assert!(
        samples
            .iter()
            .any(|s| s["raft_log_entries"].as_u64() > Some(0)),
        "{r}"
    );
    let mut last_t = -1.0;
    for s in samples {
        let t = s["t_secs"].as_f64().expect("t_secs");
        assert!(t > last_t, "samples out of order: {samples:?}");
        last_t = t;
        for key in ["ops", "rss_bytes", "disk_bytes", "raft_log_entries"] {
            assert!(s[key].is_u64(), "{key} in {s}");
        }
    }
    // Start is the first sample at or after the 5 s warm-up, end the last.
    let start_t = r["start_t_secs"].as_f64().expect("start_t_secs");
    assert!(start_t >= 5.0, "{r}");
    let first_after_warmup = samples
        .iter()
        .find(|s| s["t_secs"].as_f64().is_some_and(|t| t >= 5.0))
        .expect("a sample after the warm-up");
    assert_eq!(r["rss_bytes_start"], first_after_warmup["rss_bytes"]);
    let end = samples.last().expect("a sample");
    assert_eq!(r["ops"], end["ops"]);
    assert_eq!(r["disk_bytes_end"], end["disk_bytes"]);
    assert_eq!(r["notes"].as_array().map(Vec::len), Some(0), "{r}");
}
