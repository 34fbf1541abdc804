//! The JSON report of `creek bench transfer` and its readable summary.

use serde_json::{json, Value as Json};

use super::measure::{micros, probe_stats, stalls};
use super::{Args, Measured, AFTER, BASELINE, REPLICAS};

fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

/// The JSON report of a run.
pub(super) fn report(args: &Args, m: &Measured) -> Json {
    let r = &m.rebuild;
    let mut notes: Vec<String> = Vec::new();
    // The transfer began after the last reply without a fetch under way
    // when no reply showed one (a small state, fetched between polls).
    let first_chunk = r.first_chunk.unwrap_or_else(|| {
        notes.push(
            "no status reply showed the fetch under way: the transfer is timed from the \
             last reply before the install (an overestimate)"
                .into(),
        );
        r.last_before_install
    });
    let transfer_secs = (r.installed - first_chunk).as_secs_f64();
    let rebuild_secs = (r.installed - r.restart).as_secs_f64();
    let mb_per_s = if transfer_secs > 0.0 {
        r.bytes as f64 / 1e6 / transfer_secs
    } else {
        0.0
    };
    let before = probe_stats(&m.probe, m.kill - BASELINE, m.kill, |o| {
        o.start >= m.kill - BASELINE && o.end <= m.kill
    });
    let during = probe_stats(&m.probe, r.restart, r.installed, |o| {
        o.start < r.installed && o.end > r.restart
    });
    let after_end = r.installed + AFTER;
    let after = probe_stats(&m.probe, r.installed, after_end, |o| {
        o.start >= r.installed && o.end <= after_end
    });
    if r.restarts > 0 {
        notes.push(format!(
            "the fetch started over {} times: bytes is the last checkpoint's size",
            r.restarts
        ));
    }
    if m.victim_led {
        notes.push("replica 3 led when it was killed: the numbers include an election".into());
    }
    let failed = before.failed + during.failed + after.failed;
    if failed > 0 {
        notes.push(format!(
            "{failed} probe ops failed, the last with: {}",
            m.probe_error.as_deref().unwrap_or("?")
        ));
    }
    // Chunks arrive until the last reply that showed the fetch; decoding
    // and installing follow (the replica answers no status meanwhile).
    let (chunks_secs, install_secs) = match r.last_fetching {
        Some(t) => (
            round((t - first_chunk).as_secs_f64(), 3),
            round((r.installed - t).as_secs_f64(), 3),
        ),
        None => (0.0, round(transfer_secs, 3)),
    };
    let windows = [
        ("before", m.kill - BASELINE, m.kill),
        ("during", r.restart, r.installed),
        ("after", r.installed, after_end),
    ];
    let replica_stalls: Vec<Json> = (1..)
        .zip(&m.status)
        .flat_map(|(replica, samples): (usize, _)| {
            windows.iter().map(move |&(name, from, to)| {
                let s = stalls(samples, from, to);
                json!({
                    "replica": replica,
                    "window": name,
                    "status_max_us": s.status_max_us,
                    "write_wait_max_us": s.write_wait_max_us,
                })
            })
        })
        .collect();
    json!({
        "bench": "transfer",
        "mib": args.mib,
        "value_kib": args.value_kib,
        "values": args.values(),
        "replicas": REPLICAS,
        "checkpoint_every_secs": args.checkpoint_secs,
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "load_secs": round(m.loaded.secs, 1),
        "load_mb_per_s": round((args.values() * args.value_kib * 1024) as f64 / 1e6 / m.loaded.secs.max(1e-3), 1),
        "load_errors": m.loaded.errors,
        "bytes": r.bytes,
        "first_chunk_secs": round((first_chunk - r.restart).as_secs_f64(), 3),
        "transfer_secs": round(transfer_secs, 3),
        "chunks_secs": chunks_secs,
        "install_secs": install_secs,
        "mb_per_s": round(mb_per_s, 1),
        "rebuild_secs": round(rebuild_secs, 3),
        "senders": m.senders,
        "fetch_restarts": r.restarts,
        "rebuilt_status_max_us": micros(r.status_max),
        "probe_ops_before": before.ops,
        "probe_p50_us_before": before.p50_us,
        "probe_p99_us_before": before.p99_us,
        "probe_max_us_before": before.max_us,
        "probe_max_gap_us_before": before.max_gap_us,
        "probe_ops_during": during.ops,
        "probe_p50_us_during": during.p50_us,
        "probe_p99_us_during": during.p99_us,
        "probe_max_us_during": during.max_us,
        "probe_max_gap_us_during": during.max_gap_us,
        "probe_ops_after": after.ops,
        "probe_p50_us_after": after.p50_us,
        "probe_p99_us_after": after.p99_us,
        "probe_max_us_after": after.max_us,
        "probe_max_gap_us_after": after.max_gap_us,
        "replica_stalls": replica_stalls,
        "notes": notes,
    })
}

/// The report as a few readable lines.
pub(super) fn summary(r: &Json) -> String {
    let u = |k: &str| r[k].as_u64().unwrap_or(0);
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    let ms = |k: &str| u(k) as f64 / 1000.0;
    let mut out = format!(
        "transfer: {} MiB in {} KiB values on {} replicas (checkpoints every {} s), \
         loaded in {:.1} s ({:.1} MB/s)\n",
        u("mib"),
        u("value_kib"),
        u("replicas"),
        u("checkpoint_every_secs"),
        f("load_secs"),
        f("load_mb_per_s"),
    );
    out += &format!(
        "checkpoint {:.1} MB from replica {}: first chunk {:.2} s after the restart, \
         transferred and installed in {:.2} s ({:.1} MB/s; chunks {:.2} s, decode and \
         install {:.2} s), rebuilt {:.2} s after the restart\n",
        u("bytes") as f64 / 1e6,
        r["senders"]
            .as_array()
            .map(|s| s.iter().map(Json::to_string).collect::<Vec<_>>().join("+"))
            .unwrap_or_default(),
        f("first_chunk_secs"),
        f("transfer_secs"),
        f("mb_per_s"),
        f("chunks_secs"),
        f("install_secs"),
        f("rebuild_secs"),
    );
    out += "probe, strong kv.incr at replica 1, in ms:\n";
    out += &format!(
        "  {:<7} {:>6} {:>7} {:>7} {:>7} {:>8}\n",
        "", "ops", "p50", "p99", "max", "max gap"
    );
    for w in ["before", "during", "after"] {
        out += &format!(
            "  {w:<7} {:>6} {:>7.1} {:>7.1} {:>7.1} {:>8.1}\n",
            u(&format!("probe_ops_{w}")),
            ms(&format!("probe_p50_us_{w}")),
            ms(&format!("probe_p99_us_{w}")),
            ms(&format!("probe_max_us_{w}")),
            ms(&format!("probe_max_gap_us_{w}")),
        );
    }
    out += "stalls per replica, in ms (slowest status reply: node thread; longest write wait: disk):\n";
    out += &format!(
        "  {:<7} {:>7} {:>12} {:>12}\n",
        "", "replica", "status max", "write wait"
    );
    for s in r["replica_stalls"].as_array().into_iter().flatten() {
        out += &format!(
            "  {:<7} {:>7} {:>12.1} {:>12.1}\n",
            s["window"].as_str().unwrap_or_default(),
            s["replica"].as_u64().unwrap_or(0),
            s["status_max_us"].as_u64().unwrap_or(0) as f64 / 1000.0,
            s["write_wait_max_us"].as_u64().unwrap_or(0) as f64 / 1000.0,
        );
    }
    for n in r["notes"].as_array().into_iter().flatten() {
        out += &format!("note: {}\n", n.as_str().unwrap_or_default());
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::tests::{args, ops};
    use super::super::{Loaded, Rebuild};
    use super::*;

    #[test]
    fn the_report_has_the_documented_fields_and_falls_back_without_a_chunk_seen() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut probe = ops(t0, 0, &[10; 600]);
        probe.extend(ops(t0, 6000, &[150]));
        probe.extend(ops(t0, 6150, &[10; 600]));
        let m = Measured {
            loaded: Loaded {
                secs: 2.0,
                errors: 0,
            },
            rebuild: Rebuild {
                restart: at(5500),
                first_chunk: None,
                last_before_install: at(6000),
                last_fetching: None,
                installed: at(6500),
                bytes: 10_000_000,
                restarts: 0,
                status_max: Duration::from_millis(30),
            },
            kill: at(5400),
            probe,
            probe_error: None,
            victim_led: false,
            senders: vec![1],
            status: vec![Vec::new(); 3],
        };
        let r = report(&args(8, 64), &m);
        for key in [
            "bytes",
            "transfer_secs",
            "mb_per_s",
            "rebuild_secs",
            "probe_p50_us_before",
            "probe_p99_us_before",
            "probe_max_us_before",
            "probe_p50_us_during",
            "probe_p99_us_during",
            "probe_max_us_during",
            "probe_max_gap_us_during",
            "mib",
            "value_kib",
        ] {
            assert!(r[key].is_number(), "{key} in {r}");
        }
        assert_eq!(r["transfer_secs"], 0.5);
        assert_eq!(r["mb_per_s"], 20.0);
        assert_eq!(r["rebuild_secs"], 1.0);
        assert_eq!(r["probe_max_us_before"], 10_000);
        assert_eq!(r["probe_max_us_during"], 150_000);
        assert_eq!(r["probe_max_gap_us_during"], 150_000);
        assert_eq!(r["notes"].as_array().map(Vec::len), Some(1), "{r}");
        assert_eq!(r["replica_stalls"].as_array().map(Vec::len), Some(9), "{r}");
        assert!(summary(&r).contains("MB/s"));
    }
}
