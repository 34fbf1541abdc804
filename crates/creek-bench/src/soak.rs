//! `creek bench soak`: a long YCSB-A run against a local cluster of
//! `creek serve` processes, sampling what every replica holds as time
//! passes — resident memory, data-directory bytes, consensus-log entries —
//! to show whether any of them grows without bound under a steady load.
//!
//! The cluster is started with the server defaults (so checkpoints on at
//! `checkpoint_every_secs`; `servers::Servers`), loaded with the YCSB
//! workload's setup calls as `bench ycsb --target cluster` loads it. Then
//! closed-loop clients run the workload for `--minutes`; every
//! `--sample-secs` the bench reads each server's `VmRSS`, the size of its
//! data directory and `Status.raft_log_entries`. Samples are sums over the
//! replicas; "start" is the first sample at or after the warm-up, "end" the
//! last.
//!
//! Not a throughput or latency benchmark (`creek bench ycsb --target
//! cluster` is): the clients keep no per-op history, only counts, so a long
//! run costs the bench process constant memory and its own growth does not
//! crowd the servers.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use creek_client::{CallOptions, Client, Levels};
use creek_server::ServerConfig;
use creek_sim::rng::Rng;
use creek_sim::workload::{self, Workload, WorkloadConfig};
use creek_workloads::ycsb::{Distribution, Mix, YcsbConfig};
use serde_json::{json, Value as Json};

use crate::cluster::find_leader;
use crate::load::cluster::{client_args, setup};
use crate::load::Progress;
use crate::servers::Servers;

/// Deadline of one op; also how long in-flight ops may take to finish
/// after the clients stop.
const OP_TIMEOUT: Duration = Duration::from_secs(15);
/// A client's pause after a failed op, so that a refused connection does
/// not spin.
const ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Longest run accepted.
const MINUTES_MAX: f64 = 7.0 * 24.0 * 60.0;

/// Arguments of `creek bench soak`.
#[derive(clap::Args)]
pub struct Args {
    /// Minutes of load after the setup (fractional, e.g. 0.5).
    #[arg(long)]
    minutes: f64,
    /// Replicas in the cluster.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Seconds of load before the "start" sample.
    #[arg(long, default_value_t = 60.0)]
    warmup_secs: f64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 5.0)]
    sample_secs: f64,
    /// Closed-loop clients, spread round-robin over the replicas.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// YCSB records loaded.
    #[arg(long, default_value_t = 10_000)]
    records: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Share of ops issued strong (the rest weak).
    #[arg(long, default_value_t = 0.3)]
    strong_share: f64,
    /// Seed of the op generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON line.
    #[arg(long)]
    json: bool,
}

impl Args {
    fn validate(&self) -> Result<(), String> {
        if !(self.minutes > 0.0 && self.minutes <= MINUTES_MAX) {
            return Err(format!(
                "--minutes {} must be above 0 and at most {MINUTES_MAX} (a week)",
                self.minutes
            ));
        }
        if !(self.sample_secs.is_finite() && self.sample_secs >= 0.1) {
            return Err(format!(
                "--sample-secs {} must be at least 0.1",
                self.sample_secs
            ));
        }
        if !(self.warmup_secs.is_finite() && self.warmup_secs >= 0.0) {
            return Err(format!(
                "--warmup-secs {} must not be negative",
                self.warmup_secs
            ));
        }
        if !(1..=9).contains(&self.replicas) || self.clients == 0 {
            return Err("--replicas must be within 1..=9 and --clients positive".into());
        }
        Ok(())
    }
}

/// One sample: sums over the replicas, and each replica's values.
struct Sample {
    t_secs: f64,
    ops: u64,
    replicas: Vec<ReplicaSample>,
}

#[derive(Clone, Copy)]
struct ReplicaSample {
    rss_bytes: u64,
    disk_bytes: u64,
    raft_log_entries: u64,
}

impl Sample {
    fn sum(&self, f: impl Fn(&ReplicaSample) -> u64) -> u64 {
        self.replicas.iter().map(f).sum()
    }

    fn rss_bytes(&self) -> u64 {
        self.sum(|r| r.rss_bytes)
    }

    fn disk_bytes(&self) -> u64 {
        self.sum(|r| r.disk_bytes)
    }

    fn raft_log_entries(&self) -> u64 {
        self.sum(|r| r.raft_log_entries)
    }

    fn to_json(&self) -> Json {
        json!({
            "t_secs": (self.t_secs * 10.0).round() / 10.0,
            "ops": self.ops,
            "rss_bytes": self.rss_bytes(),
            "disk_bytes": self.disk_bytes(),
            "raft_log_entries": self.raft_log_entries(),
        })
    }
}

/// A process's resident set in bytes (`VmRSS`), or why it has none: the
/// process exited (a zombie until reaped has no `VmRSS`).
fn process_rss_bytes(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("process {pid} is gone ({e})"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    if field("State:").is_some_and(|s| s.starts_with('Z') || s.starts_with('X')) {
        return Err(format!("process {pid} exited"));
    }
    let kb: u64 = field("VmRSS:")
        .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("process {pid} reports no VmRSS"))?;
    Ok(kb * 1024)
}

/// The sizes of the files under `dir`, recursively (links not followed).
/// Files that vanish while it walks (a replaced file) count as empty.
fn dir_bytes(dir: &Path) -> Result<u64, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(format!("reading {}: {e}", dir.display())),
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if meta.is_dir() {
            total += dir_bytes(&entry.path())?;
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

/// What the client tasks share.
struct Shared {
    source: Mutex<(Box<dyn Workload>, Rng)>,
    stop: AtomicBool,
    /// Ops answered: a weak op's preliminary view, a strong op's final view.
    ops: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Shared {
    fn error(&self, kind: &str) {
        if let Ok(mut errors) = self.errors.lock() {
            *errors.entry(kind.to_owned()).or_default() += 1;
        }
    }
}

/// One closed-loop client: the next op, its answer, again.
async fn client(shared: Arc<Shared>, client: Client, session: u32) {
    while !shared.stop.load(Ordering::Relaxed) {
        let next = {
            let Ok(mut s) = shared.source.lock() else {
                return;
            };
            let (workload, rng) = &mut *s;
            workload.next_op(rng, session)
        };
        let Ok(args) = client_args(&next.call) else {
            shared.error("undecodable arguments");
            return;
        };
        // Strong ops ask for both views, as `bench ycsb` sends them; the
        // client waits for the final one.
        let levels = if next.strong {
            Levels::Both
        } else {
            Levels::Weak
        };
        let options = CallOptions {
            weak_final: false,
            timeout: Some(OP_TIMEOUT),
            ..Default::default()
        };
        let answer = async {
            let op = client
                .invoke_with(next.call.name.to_string(), args, levels, options)
                .await?;
            if next.strong {
                op.final_view().await
            } else {
                op.preliminary().await
            }
        }
        .await;
        match answer {
            Ok(_) => {
                shared.ops.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let kind = e.to_string();
                shared.error(kind.split(':').next().unwrap_or("error"));
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
}

/// Sample every replica: its process, data directory and `Status`.
async fn sample(
    procs: &Servers,
    status: &[Client],
    t0: Instant,
    shared: &Shared,
) -> Result<Sample, String> {
    let t_secs = t0.elapsed().as_secs_f64();
    let ops = shared.ops.load(Ordering::Relaxed);
    let mut replicas = Vec::with_capacity(status.len());
    for (i, c) in status.iter().enumerate() {
        let died = |why: String| {
            format!(
                "replica {} died during the soak: {why}; {}",
                i + 1,
                creek_server::replica_log::log_tail(&procs.log_path(i))
            )
        };
        let pid = procs
            .pid(i)
            .ok_or_else(|| died("it is not running".into()))?;
        let rss_bytes = process_rss_bytes(pid).map_err(died)?;
        let s = c.status().await.map_err(|e| match process_rss_bytes(pid) {
            Err(why) => died(why),
            Ok(_) => format!("replica {} status: {e}", i + 1),
        })?;
        let disk_bytes = dir_bytes(&procs.data_dir(i))?;
        replicas.push(ReplicaSample {
            rss_bytes,
            disk_bytes,
            raft_log_entries: s.raft_log_entries,
        });
    }
    Ok(Sample {
        t_secs,
        ops,
        replicas,
    })
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn growth(end: u64, start: u64) -> Json {
    if start == 0 {
        json!(null)
    } else {
        json!((end as f64 / start as f64 * 1000.0).round() / 1000.0)
    }
}

/// Start the cluster, load it, run the clients, sample until the end.
async fn soak(
    args: &Args,
    procs: &Servers,
    workload: Box<dyn Workload>,
    progress: &Progress,
) -> Result<(Vec<Sample>, BTreeMap<String, u64>), String> {
    let addrs: &[SocketAddr] = &procs.clients;
    find_leader(addrs, None).await?;
    eprintln!(
        "bench soak: loading {} records of {} bytes…",
        args.records, args.value_bytes
    );
    setup(addrs, workload.as_ref()).await?;
    let mut status = Vec::with_capacity(addrs.len());
    for a in addrs {
        status.push(
            Client::connect([a.to_string()])
                .await
                .map_err(|e| format!("connecting to {a}: {e}"))?,
        );
    }
    let shared = Arc::new(Shared {
        source: Mutex::new((workload, Rng::new(args.seed))),
        stop: AtomicBool::new(false),
        ops: AtomicU64::new(0),
        errors: Mutex::new(BTreeMap::new()),
    });
    let mut conns = Vec::with_capacity(args.clients);
    for session in 0..args.clients {
        let a = addrs[session % addrs.len()];
        conns.push(
            Client::connect([a.to_string()])
                .await
                .map_err(|e| format!("connecting to {a}: {e}"))?,
        );
    }
    // Every client connected: the load starts at once, at t0.
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (session, c) in (0u32..).zip(conns) {
        tasks.spawn(client(shared.clone(), c, session));
    }
    let duration_secs = args.minutes * 60.0;
    let tty = std::io::stderr().is_terminal();
    let mut samples: Vec<Sample> = Vec::new();
    let result = async {
        for k in 0u64.. {
            let at = (k as f64 * args.sample_secs).min(duration_secs);
            tokio::time::sleep_until((t0 + Duration::from_secs_f64(at)).into()).await;
            let s = sample(procs, &status, t0, &shared).await?;
            let line = format!(
                "t {:.0}s  ops {}  rss {:.1} MB  disk {:.1} MB  raft log {}",
                s.t_secs,
                s.ops,
                mb(s.rss_bytes()),
                mb(s.disk_bytes()),
                s.raft_log_entries()
            );
            if tty {
                progress.update(0, s.t_secs / duration_secs, &line);
            } else {
                eprintln!("bench soak: {line}");
            }
            samples.push(s);
            if at >= duration_secs {
                break;
            }
        }
        Ok::<_, String>(())
    }
    .await;
    progress.finish();
    shared.stop.store(true, Ordering::Relaxed);
    // In-flight ops end by their deadline at the latest.
    let _ = tokio::time::timeout(OP_TIMEOUT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    result?;
    let errors = shared.errors.lock().map(|e| e.clone()).unwrap_or_default();
    Ok((samples, errors))
}

/// Run the benchmark.
pub fn run(args: &Args) -> Result<(), String> {
    args.validate()?;
    let config = WorkloadConfig {
        ycsb: YcsbConfig {
            mix: Mix::A,
            records: args.records,
            value_bytes: args.value_bytes,
            distribution: Distribution::Zipfian,
            strong_share: args.strong_share,
        },
        // Weak ops are answered by their preliminary view and ask for no
        // final one.
        final_share: 0.0,
        ..WorkloadConfig::default()
    };
    // Built first: bad settings fail before a cluster starts.
    let workload = workload::by_name("ycsb", &config)?;
    let procs = crate::servers::start(args.replicas, "soak", "warn", false, |_| {})?;
    // What the servers run with, as their configuration file says.
    let server = ServerConfig::from_file(&procs.dir.join("r1.toml")).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let progress = Progress::new(1);
    let (samples, errors) = rt.block_on(async {
        tokio::select! {
            r = soak(args, &procs, workload, &progress) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_string()),
        }
    })?;
    drop(rt);
    drop(procs);
    let report = report(args, server.checkpoint_every_secs, &samples, errors)?;
    if args.json {
        crate::print_report(&report, true)
    } else {
        println!("{}", summary(&report));
        Ok(())
    }
}

/// The JSON report of a finished run: "start" is the first sample at or
/// after the warm-up (the first sample if the run is shorter), "end" the
/// last.
fn report(
    args: &Args,
    checkpoint_every_secs: u64,
    samples: &[Sample],
    errors: BTreeMap<String, u64>,
) -> Result<Json, String> {
    let (Some(first), Some(end)) = (samples.first(), samples.last()) else {
        return Err("no sample was taken".into());
    };
    let mut notes = Vec::new();
    let start = match samples.iter().find(|s| s.t_secs >= args.warmup_secs) {
        Some(s) => s,
        None => {
            notes.push(format!(
                "the run ({:.0} s) is shorter than the warm-up ({:.0} s): start is the first sample",
                end.t_secs, args.warmup_secs
            ));
            first
        }
    };
    if std::ptr::eq(start, end) {
        notes.push("start and end are the same sample: no growth measured".to_string());
    }
    let failed: u64 = errors.values().sum();
    if failed > 0 {
        notes.push(format!("{failed} ops failed (see errors)"));
    }
    let tenth = |t: f64| (t * 10.0).round() / 10.0;
    let replicas_end: Vec<Json> = (1..)
        .zip(&end.replicas)
        .map(|(replica, r): (u32, _)| {
            json!({
                "replica": replica,
                "rss_bytes": r.rss_bytes,
                "disk_bytes": r.disk_bytes,
                "raft_log_entries": r.raft_log_entries,
            })
        })
        .collect();
    Ok(json!({
        "bench": "soak",
        "minutes": args.minutes,
        "replicas": args.replicas,
        "clients": args.clients,
        "workload": "ycsb-a",
        "distribution": "zipfian",
        "records": args.records,
        "value_bytes": args.value_bytes,
        "strong_share": args.strong_share,
        "seed": args.seed,
        "warmup_secs": args.warmup_secs,
        "sample_secs": args.sample_secs,
        "checkpoint_every_secs": checkpoint_every_secs,
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "ops": end.ops,
        "ops_per_sec": (end.ops as f64 / end.t_secs.max(1e-3)).round(),
        "errors": errors,
        "start_t_secs": tenth(start.t_secs),
        "end_t_secs": tenth(end.t_secs),
        "rss_bytes_start": start.rss_bytes(),
        "rss_bytes_end": end.rss_bytes(),
        "rss_growth": growth(end.rss_bytes(), start.rss_bytes()),
        "disk_bytes_start": start.disk_bytes(),
        "disk_bytes_end": end.disk_bytes(),
        "disk_growth": growth(end.disk_bytes(), start.disk_bytes()),
        "raft_log_entries_start": start.raft_log_entries(),
        "raft_log_entries_end": end.raft_log_entries(),
        "replicas_end": replicas_end,
        "samples": samples.iter().map(Sample::to_json).collect::<Vec<_>>(),
        "notes": notes,
    }))
}

/// The report as a few readable lines.
fn summary(r: &Json) -> String {
    let u = |v: &Json| v.as_u64().unwrap_or(0);
    let f = |v: &Json| v.as_f64().unwrap_or(0.0);
    let ratio = |k: &str| {
        r[k].as_f64()
            .map_or("-".to_string(), |g| format!("x{g:.2}"))
    };
    let errors = match r["errors"].as_object() {
        Some(e) if !e.is_empty() => e
            .iter()
            .map(|(kind, n)| format!("{} {kind}", u(n)))
            .collect::<Vec<_>>()
            .join(", "),
        _ => "none".to_string(),
    };
    let mut out = format!(
        "soak: YCSB-A (zipfian) for {} min on {} replicas (checkpoints every {} s): \
         {} clients, {} records of {} bytes, {:.0}% strong\n",
        f(&r["minutes"]),
        u(&r["replicas"]),
        u(&r["checkpoint_every_secs"]),
        u(&r["clients"]),
        u(&r["records"]),
        u(&r["value_bytes"]),
        f(&r["strong_share"]) * 100.0,
    );
    out += &format!(
        "ops: {} ({:.0} per second); failed: {errors}\n",
        u(&r["ops"]),
        f(&r["ops_per_sec"]),
    );
    out += &format!(
        "start (t {:.1} s) -> end (t {:.1} s), sums over the replicas:\n",
        f(&r["start_t_secs"]),
        f(&r["end_t_secs"])
    );
    out += &format!(
        "  rss       {:>10.1} MB -> {:>10.1} MB  {}\n",
        mb(u(&r["rss_bytes_start"])),
        mb(u(&r["rss_bytes_end"])),
        ratio("rss_growth")
    );
    out += &format!(
        "  disk      {:>10.1} MB -> {:>10.1} MB  {}\n",
        mb(u(&r["disk_bytes_start"])),
        mb(u(&r["disk_bytes_end"])),
        ratio("disk_growth")
    );
    out += &format!(
        "  raft log  {:>10}    -> {:>10}    entries\n",
        u(&r["raft_log_entries_start"]),
        u(&r["raft_log_entries_end"])
    );
    out += "samples:\n  t_secs        ops   rss_MB  disk_MB  raft_log_entries\n";
    for s in r["samples"].as_array().into_iter().flatten() {
        out += &format!(
            "  {:>6.1} {:>10} {:>8.1} {:>8.1} {:>17}\n",
            f(&s["t_secs"]),
            u(&s["ops"]),
            mb(u(&s["rss_bytes"])),
            mb(u(&s["disk_bytes"])),
            u(&s["raft_log_entries"])
        );
    }
    for n in r["notes"].as_array().into_iter().flatten() {
        out += &format!("note: {}\n", n.as_str().unwrap_or_default());
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(minutes: f64, warmup_secs: f64) -> Args {
        Args {
            minutes,
            replicas: 2,
            warmup_secs,
            sample_secs: 2.0,
            clients: 16,
            records: 10_000,
            value_bytes: 100,
            strong_share: 0.3,
            seed: 1,
            json: true,
        }
    }

    /// Samples at 0, 2, 4, 6 s; replica values grow with time.
    fn samples() -> Vec<Sample> {
        (0..4u64)
            .map(|k| Sample {
                t_secs: 2.0 * k as f64,
                ops: 100 * k,
                replicas: vec![
                    ReplicaSample {
                        rss_bytes: 1000 + 100 * k,
                        disk_bytes: 10 * (k + 1),
                        raft_log_entries: 5 * k,
                    };
                    2
                ],
            })
            .collect()
    }

    #[test]
    fn start_is_the_first_sample_at_or_after_the_warm_up_and_end_the_last() {
        let r = report(&args(0.1, 3.0), 30, &samples(), BTreeMap::new()).expect("report");
        assert_eq!(r["start_t_secs"], 4.0);
        assert_eq!(r["end_t_secs"], 6.0);
        assert_eq!(r["rss_bytes_start"], 2 * 1200);
        assert_eq!(r["rss_bytes_end"], 2 * 1300);
        assert_eq!(r["disk_bytes_start"], 2 * 30);
        assert_eq!(r["disk_bytes_end"], 2 * 40);
        assert_eq!(r["disk_growth"], 1.333);
        assert_eq!(r["raft_log_entries_end"], 2 * 15);
        assert_eq!(r["ops"], 300);
        assert_eq!(r["samples"].as_array().map(Vec::len), Some(4));
        assert_eq!(r["notes"], json!([]));
    }

    #[test]
    fn a_run_shorter_than_the_warm_up_starts_at_the_first_sample_and_says_so() {
        let r = report(&args(0.1, 60.0), 30, &samples(), BTreeMap::new()).expect("report");
        assert_eq!(r["start_t_secs"], 0.0);
        assert_eq!(r["rss_bytes_start"], 2 * 1000);
        let notes = r["notes"].as_array().expect("notes");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].as_str().is_some_and(|n| n.contains("warm-up")));
        assert!(summary(&r).contains("note: the run"));
    }

    #[test]
    fn growth_from_nothing_is_null_and_failures_are_noted() {
        assert_eq!(growth(5, 0), json!(null));
        let errors = BTreeMap::from([("unavailable".to_string(), 3)]);
        let r = report(&args(0.1, 0.0), 30, &samples(), errors).expect("report");
        assert_eq!(r["errors"]["unavailable"], 3);
        assert!(r["notes"][0]
            .as_str()
            .is_some_and(|n| n.starts_with("3 ops")));
        assert!(report(&args(0.1, 0.0), 30, &[], BTreeMap::new()).is_err());
    }

    #[test]
    fn bad_settings_are_refused_before_anything_starts() {
        assert!(args(0.0, 0.0).validate().is_err());
        assert!(args(f64::NAN, 0.0).validate().is_err());
        assert!(args(f64::INFINITY, 0.0).validate().is_err());
        assert!(args(1.0, -1.0).validate().is_err());
        assert!(args(0.25, 5.0).validate().is_ok());
    }

    #[test]
    fn directory_sizes_sum_the_files_below() {
        let dir = std::env::temp_dir().join(format!("creek-soak-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b")).expect("mkdir");
        std::fs::write(dir.join("x"), [0u8; 10]).expect("write");
        std::fs::write(dir.join("a/b/y"), [0u8; 32]).expect("write");
        assert_eq!(dir_bytes(&dir), Ok(42));
        assert_eq!(dir_bytes(&dir.join("missing")), Ok(0));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_running_process_has_a_resident_set() {
        let rss = process_rss_bytes(std::process::id()).expect("our own VmRSS");
        assert!(rss > 0);
    }
}
