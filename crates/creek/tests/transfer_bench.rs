//! End-to-end: `creek bench transfer --mib 8` starts a real cluster, loads
//! 8 MiB, wipes replica 3 and times its rebuild from a member's checkpoint
//! while a probe client keeps calling (docs/bench/transfer.md). The command
//! cleans up its own servers; the test bounds its wait.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Far beyond the run (about 20 s): only a hang hits it.
const LIMIT: Duration = Duration::from_secs(180);

fn f(report: &Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {report}"))
}

#[test]
fn a_wiped_replica_is_rebuilt_and_the_transfer_is_timed() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_creek"))
        // Checkpoints every 5 s: the bench waits one interval after the load.
        .args([
            "bench",
            "transfer",
            "--mib",
            "8",
            "--checkpoint-secs",
            "5",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn creek bench transfer");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for creek bench transfer") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("creek bench transfer ran longer than {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .expect("piped stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    child
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert!(status.success(), "exit {status}; stderr:\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line expected:\n{stdout}");
    let r: Value = serde_json::from_str(lines[0]).expect("the report is JSON");

    assert_eq!(r["bench"], "transfer");
    assert_eq!(r["mib"], 8);
    assert_eq!(r["value_kib"], 64);
    assert_eq!(r["checkpoint_every_secs"], 5);
    // The checkpoint holds the 8 MiB of values, and more.
    assert!(f(&r, "bytes") >= (8u64 << 20) as f64, "{r}");
    assert!(f(&r, "mb_per_s") > 0.0, "{r}");
    assert!(f(&r, "transfer_secs") > 0.0, "{r}");
    let rebuild = f(&r, "rebuild_secs");
    assert!(rebuild > 0.0 && rebuild >= f(&r, "transfer_secs"), "{r}");
    // A member served the checkpoint: replica 1 or 2.
    let senders = r["senders"].as_array().expect("senders");
    assert!(
        !senders.is_empty() && senders.iter().all(|s| s == 1 || s == 2),
        "{r}"
    );
    // The probe ran before and during the rebuild.
    for w in ["before", "during"] {
        assert!(f(&r, &format!("probe_ops_{w}")) > 0.0, "{w} in {r}");
        for k in ["p50", "p99", "max"] {
            assert!(r[format!("probe_{k}_us_{w}")].is_u64(), "{k} {w} in {r}");
        }
        assert!(
            f(&r, &format!("probe_p50_us_{w}")) <= f(&r, &format!("probe_max_us_{w}")),
            "{r}"
        );
    }
    assert!(r["probe_max_gap_us_during"].is_u64(), "{r}");
}
