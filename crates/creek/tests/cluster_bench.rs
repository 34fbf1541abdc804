//! End-to-end: `creek bench cluster --compare-tls` on tiny numbers starts a
//! plaintext cluster and then a TLS one, measures both through clients
//! that connect as each cluster serves (a TLS cluster refuses plaintext
//! clients, a plaintext one TLS clients, so a report at all means the
//! links were what it says), and prints one JSON object with both and the
//! ratios of their p50s (docs/bench/cluster.md). Numbers are not checked.

mod common;

use common::number;
use std::time::Duration;

/// Far beyond the run (two clusters of a few seconds each): only a hang
/// hits it.
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn compare_tls_measures_a_plaintext_then_a_tls_cluster() {
    let r = common::run_json_command(
        &[
            "bench",
            "cluster",
            "--compare-tls",
            "--latency-ops",
            "20",
            "--seconds",
            "0.2",
            "--clients",
            "1",
            "--under-load",
            "0",
            "--json",
        ],
        LIMIT,
    );

    assert_eq!(r["bench"], "cluster");
    assert_eq!(r["plain"]["tls"], false, "{r}");
    assert_eq!(r["tls"]["tls"], true, "{r}");
    for run in ["plain", "tls"] {
        assert_eq!(number(&r[run], "replicas"), 3.0, "{r}");
        for level in ["weak", "strong"] {
            assert!(number(&r[run][level], "p50_us") > 0.0, "{run} {level}: {r}");
        }
    }
    for ratio in ["strong_p50_tls_vs_plain", "weak_p50_tls_vs_plain"] {
        assert!(number(&r["ratios"], ratio) > 0.0, "{ratio}: {r}");
    }
}
