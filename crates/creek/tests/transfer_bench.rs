//! End-to-end: `creek bench transfer --mib 8` starts a real cluster, loads
//! 8 MiB, wipes replica 3 and times its rebuild from a member's checkpoint
//! while a probe client keeps calling (docs/bench/transfer.md). The command
//! cleans up its own servers; the test bounds its wait.

mod common;

use common::number;
use std::time::Duration;

/// Far beyond the run (about 20 s): only a hang hits it.
const LIMIT: Duration = Duration::from_secs(180);

#[test]
fn a_wiped_replica_is_rebuilt_and_the_transfer_is_timed() {
    // Checkpoints every 5 s: the bench waits one interval after the load.
    let r = common::run_json_command(
        &[
            "bench",
            "transfer",
            "--mib",
            "8",
            "--checkpoint-secs",
            "5",
            "--json",
        ],
        LIMIT,
    );

    assert_eq!(r["bench"], "transfer");
    assert_eq!(r["mib"], 8);
    assert_eq!(r["value_kib"], 64);
    assert_eq!(r["checkpoint_every_secs"], 5);
    // The checkpoint holds the 8 MiB of values, and more.
    assert!(number(&r, "bytes") >= (8u64 << 20) as f64, "{r}");
    assert!(number(&r, "mb_per_s") > 0.0, "{r}");
    assert!(number(&r, "transfer_secs") > 0.0, "{r}");
    let rebuild = number(&r, "rebuild_secs");
    assert!(
        rebuild > 0.0 && rebuild >= number(&r, "transfer_secs"),
        "{r}"
    );
    // A member served the checkpoint: replica 1 or 2.
    let senders = r["senders"].as_array().expect("senders");
    assert!(
        !senders.is_empty() && senders.iter().all(|s| s == 1 || s == 2),
        "{r}"
    );
    // The probe ran before and during the rebuild.
    for w in ["before", "during"] {
        assert!(number(&r, &format!("probe_ops_{w}")) > 0.0, "{w} in {r}");
        for k in ["p50", "p99", "max"] {
            assert!(r[format!("probe_{k}_us_{w}")].is_u64(), "{k} {w} in {r}");
        }
        assert!(
            number(&r, &format!("probe_p50_us_{w}")) <= number(&r, &format!("probe_max_us_{w}")),
            "{r}"
        );
    }
    assert!(r["probe_max_gap_us_during"].is_u64(), "{r}");
}
