//! `creek bench move`: keys moved from one shard to another while clients
//! use them, on a local cluster of two shards of three `creek serve`
//! processes and the directory's three (docs/shards.md, "Moving keys
//! between shards").
//!
//! 1. `--mib` of values (`--value-kib` each, strong `kv.put`s under
//!    distinct keys) are loaded into the hash slots `0..1024` — the first
//!    half of shard 0's.
//! 2. Three probes start, each a client putting one key strongly, back to
//!    back: a key of the moving slots (*moving*), a key of shard 0 that
//!    stays (*staying*), and a key of shard 1, the target (*target*).
//! 3. After `--baseline-secs` of probing, `creek shards move --from 0 --to
//!    1 --slots 0..1024` runs as a user runs it; it returns when the move
//!    is over (copied, switched, the source cleaned).
//! 4. The probes go on for [`AFTER`], then the bench reads a sample of the
//!    moved keys back through the routing client and compares them.
//!
//! Reported: the move's duration and copy rate (the target leader's
//! `move_bytes_copied`), and each probe's latency percentiles and longest
//! gap between two completed puts, before the move and during it. The
//! moving probe's gap is the stall its key sees at the switch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_client::{CallOptions, Cluster, Levels};
use creek_shard::slot_of;
use creek_types::value::Value;
use serde_json::json;

use crate::servers;
use crate::transfer::measure::{micros, probe_stats, ProbeOp, ProbeStats};

/// The slots moved: the first half of shard 0's (two shards split the
/// 4096 slots evenly).
const MOVING: std::ops::Range<u16> = 0..1024;
/// Slots of shard 0 that stay.
const STAYING: std::ops::Range<u16> = 1024..2048;
/// Slots of shard 1, the target.
const TARGET: std::ops::Range<u16> = 2048..4096;
/// Concurrent loading clients.
const LOADERS: usize = 8;
/// Probing after the move is over.
const AFTER: Duration = Duration::from_secs(5);
/// Deadline of one op (the routing client retries within it).
const OP_TIMEOUT: Duration = Duration::from_secs(30);
/// A probe's or loader's pause after a failed op.
const ERROR_PAUSE: Duration = Duration::from_millis(50);
/// Failed puts the load tolerates (each retried).
const LOAD_ERRORS_MAX: u64 = 100;
/// Moved keys read back after the move.
const SAMPLE: usize = 50;
/// Largest load (4 GiB) and value (the servers accept requests up to a
/// few MiB).
const MIB_MAX: u64 = 4 << 10;
const VALUE_KIB_MAX: u64 = 1 << 10;

/// Arguments of `creek bench move`.
#[derive(clap::Args)]
pub struct Args {
    /// MiB of values loaded into the slots that move.
    #[arg(long, default_value_t = 100)]
    mib: u64,
    /// KiB per value.
    #[arg(long, default_value_t = 64)]
    value_kib: u64,
    /// Probing before the move begins, the baseline.
    #[arg(long, default_value_t = 5)]
    baseline_secs: u64,
    /// Keep the replicas' directory (configurations, logs, data) after the
    /// run, and print where it is.
    #[arg(long)]
    keep: bool,
    /// Print one JSON line.
    #[arg(long)]
    json: bool,
}

impl Args {
    fn validate(&self) -> Result<(), String> {
        if !(1..=MIB_MAX).contains(&self.mib) {
            return Err(format!("--mib {} must be within 1..={MIB_MAX}", self.mib));
        }
        if !(1..=VALUE_KIB_MAX).contains(&self.value_kib) || self.value_kib > self.mib * 1024 {
            return Err(format!(
                "--value-kib {} must be within 1..={VALUE_KIB_MAX} and at most --mib",
                self.value_kib
            ));
        }
        if !(1..=600).contains(&self.baseline_secs) {
            return Err("--baseline-secs must be within 1..=600".into());
        }
        Ok(())
    }

    fn value_bytes(&self) -> usize {
        // Bounded by `validate`.
        (self.value_kib * 1024) as usize
    }

    fn values(&self) -> usize {
        (self.mib * 1024).div_ceil(self.value_kib) as usize
    }
}

/// The first `n` keys named `{prefix}-N` whose slots are in `slots`.
fn keys_in(prefix: &str, slots: &std::ops::Range<u16>, n: usize) -> Vec<Bytes> {
    (0u64..)
        .map(|i| Bytes::from(format!("{prefix}-{i:010}")))
        .filter(|k| slots.contains(&slot_of(k)))
        .take(n)
        .collect()
}

/// A strong op's final view, as an error when it failed or aborted.
async fn strong(c: &Cluster, procedure: &str, args: Vec<Value>) -> Result<Value, String> {
    let options = CallOptions {
        timeout: Some(OP_TIMEOUT),
        ..Default::default()
    };
    let op = c
        .invoke_with(procedure, args, Levels::Strong, options)
        .await
        .map_err(|e| e.to_string())?;
    let view = op.final_view().await.map_err(|e| e.to_string())?;
    view.outcome
        .map_err(|abort| format!("{procedure} aborted: {abort}"))
}

/// The value put under the `n`-th key: distinct from key to key.
fn value_of(pattern: &Bytes, n: usize, len: usize) -> Bytes {
    let at = n % 251;
    pattern.slice(at..at + len)
}

/// Put every key's value, strong, from [`LOADERS`] clients; the seconds
/// it took.
async fn load(
    c: &Cluster,
    keys: Arc<Vec<Bytes>>,
    pattern: &Bytes,
    len: usize,
) -> Result<f64, String> {
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..LOADERS {
        let (c, keys, next, errors, pattern) = (
            c.clone(),
            keys.clone(),
            next.clone(),
            errors.clone(),
            pattern.clone(),
        );
        tasks.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(key) = keys.get(n) else {
                    return Ok(());
                };
                let args = vec![
                    Value::Bytes(key.clone()),
                    Value::Bytes(value_of(&pattern, n, len)),
                ];
                while let Err(e) = strong(&c, "kv.put", args.clone()).await {
                    if errors.fetch_add(1, Ordering::Relaxed) >= LOAD_ERRORS_MAX {
                        return Err(format!("the load failed: {e}"));
                    }
                    tokio::time::sleep(ERROR_PAUSE).await;
                }
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|e| e.to_string())??;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Strong puts of `key`, back to back, until `stop`.
async fn probe(c: Cluster, key: Bytes, stop: Arc<AtomicBool>) -> (Vec<ProbeOp>, Option<String>) {
    let mut ops = Vec::new();
    let mut last_error = None;
    let mut n = 0i64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let start = Instant::now();
        let value = Value::Bytes(n.to_string().into());
        let r = strong(&c, "kv.put", vec![Value::Bytes(key.clone()), value]).await;
        ops.push(ProbeOp {
            start,
            end: Instant::now(),
            ok: r.is_ok(),
        });
        if let Err(e) = r {
            last_error = Some(e);
            tokio::time::sleep(ERROR_PAUSE).await;
        }
    }
    (ops, last_error)
}

fn stats_json(s: &ProbeStats) -> serde_json::Value {
    json!({
        "ops": s.ops,
        "failed": s.failed,
        "p50_us": s.p50_us,
        "p99_us": s.p99_us,
        "max_us": s.max_us,
        "max_gap_us": s.max_gap_us,
    })
}

/// Run `creek bench move` and print its report.
pub fn run(args: &Args) -> Result<(), String> {
    args.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let report = runtime.block_on(measure(args))?;
    crate::print_report(&report, args.json)
}

async fn measure(args: &Args) -> Result<serde_json::Value, String> {
    let len = args.value_bytes();
    let mut servers = servers::start_sharded(2, 3, "move", "warn", |c| {
        c.max_request_bytes = c.max_request_bytes.max(len + (64 << 10));
    })?;
    servers.keep = args.keep;
    servers.wait_accepting(Duration::from_secs(60))?;
    let shard_addrs: Vec<String> = servers.clients[..6].iter().map(|a| a.to_string()).collect();
    let directory: Vec<String> = servers.clients[6..].iter().map(|a| a.to_string()).collect();
    let c = Cluster::connect(shard_addrs.clone())
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let [moving, staying, target] = [("moving", MOVING), ("staying", STAYING), ("target", TARGET)]
        .map(|(name, slots)| keys_in(&format!("probe-{name}"), &slots, 1).remove(0));
    // Both shards elected and serving.
    for key in [&staying, &target] {
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(e) = strong(
            &c,
            "kv.put",
            vec![Value::Bytes(key.clone()), Value::Bytes("0".into())],
        )
        .await
        {
            if Instant::now() > deadline {
                return Err(format!("the cluster did not serve within 60 s: {e}"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    let keys = Arc::new(keys_in("move", &MOVING, args.values()));
    let pattern: Bytes = (0..len + 251)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    eprintln!(
        "bench move: loading {} MiB ({} values)",
        args.mib,
        keys.len()
    );
    let load_secs = load(&c, keys.clone(), &pattern, len).await?;
    eprintln!("bench move: loaded in {load_secs:.1} s; probing");

    let stop = Arc::new(AtomicBool::new(false));
    let probes: Vec<_> = [moving, staying, target]
        .into_iter()
        .map(|k| tokio::spawn(probe(c.clone(), k, stop.clone())))
        .collect();
    let baseline_start = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.baseline_secs)).await;

    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let move_start = Instant::now();
    let mut command = std::process::Command::new(exe);
    command
        .args(["shards", "--addr", &directory.join(",")])
        .args(["move", "--from", "0", "--to", "1", "--slots"])
        .arg(format!("{}..{}", MOVING.start, MOVING.end))
        .args(["--wait-secs", "3600"]);
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("running creek shards move: {e}"))?;
    let move_end = Instant::now();
    if !out.status.success() {
        stop.store(true, Ordering::Relaxed);
        return Err(format!(
            "creek shards move failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    eprintln!(
        "bench move: moved in {:.1} s; probing after it",
        (move_end - move_start).as_secs_f64()
    );
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::Relaxed);
    let mut seen = Vec::new();
    for p in probes {
        seen.push(p.await.map_err(|e| e.to_string())?);
    }

    // What the target's leader copied.
    let mut copied = (0u64, 0u64, 0u64);
    for addr in &servers.clients[3..6] {
        if let Ok(r) = creek_client::Client::connect([addr.to_string()]).await {
            if let Ok(s) = r.status().await {
                let get = |k: &str| s.counters.get(k).copied().unwrap_or(0);
                copied = copied.max((
                    get("move_bytes_copied"),
                    get("move_keys_copied"),
                    get("move_rounds"),
                ));
            }
        }
    }
    // A sample of the moved keys, read back where they are now.
    let mut mismatched = 0;
    for n in (0..keys.len()).step_by((keys.len() / SAMPLE).max(1)) {
        let got = strong(&c, "kv.get", vec![Value::Bytes(keys[n].clone())]).await?;
        if got.as_bytes() != Some(&value_of(&pattern, n, len)) {
            mismatched += 1;
        }
    }
    let map = {
        c.refresh().await.map_err(|e| e.to_string())?;
        c.map().await
    };
    let moved_to_target = keys
        .iter()
        .all(|k| map.owner(None, k) == creek_shard::ShardId(1));

    let move_secs = (move_end - move_start).as_secs_f64();
    let mut probes_json = serde_json::Map::new();
    for (name, (ops, last_error)) in ["moving", "staying", "target"].iter().zip(&seen) {
        let before = probe_stats(ops, baseline_start, move_start, |o| {
            o.start >= baseline_start && o.end <= move_start
        });
        let during = probe_stats(ops, move_start, move_end, |o| {
            o.end > move_start && o.start < move_end
        });
        probes_json.insert(
            (*name).to_owned(),
            json!({
                "before": stats_json(&before),
                "during": stats_json(&during),
                "last_error": last_error,
            }),
        );
    }
    let bytes = (keys.len() * len) as u64;
    Ok(json!({
        "bench": "move",
        "shards": 2,
        "replicas_per_shard": 3,
        "mib": args.mib,
        "value_kib": args.value_kib,
        "values": keys.len(),
        "load_secs": load_secs,
        "move_secs": move_secs,
        "move_mb_per_s": bytes as f64 / 1e6 / move_secs.max(1e-6),
        "bytes_copied": copied.0,
        "keys_copied": copied.1,
        "copy_rounds": copied.2,
        "moved_keys_at_target": moved_to_target,
        "sample_mismatched": mismatched,
        "move_us": micros(move_end - move_start),
        "probes": probes_json,
        "dir": args.keep.then(|| servers.dir.display().to_string()),
    }))
}
