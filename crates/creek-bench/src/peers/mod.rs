//! `creek bench peers`: Creek beside etcd, PostgreSQL and Redis on this
//! machine, in one run, each measured like `creek bench cluster` measures
//! Creek (3 replicas on loopback; the 1-client latency against the leader,
//! then closed-loop throughput at several client counts; 16-byte values
//! over 10,000 keys). The systems run one after another, each started in a
//! temporary directory of its own and stopped, with its directory
//! removed, before the next starts.
//!
//! Creek runs `creek bench cluster`'s code. The other systems' drivers and
//! their client crates sit behind the cargo feature `peers`;
//! `scripts/bench-peers-setup.sh` installs the servers (docs/bench/peers.md).
//! This is a benchmark for comparison on one machine, not a test of the
//! peers' correctness.

#[cfg(feature = "peers")]
use crate::driver::{self as driver, Settings};
#[cfg(feature = "peers")]
mod etcd;
#[cfg(feature = "peers")]
mod etcd_failover;
#[cfg(feature = "peers")]
mod postgres;
#[cfg(feature = "peers")]
mod procs;
#[cfg(feature = "peers")]
mod redis;

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use crate::cluster;
use crate::failover;

/// The systems `--systems` names, in their default order.
const SYSTEMS: [&str; 4] = ["creek", "etcd", "postgres", "redis"];

/// Arguments of `creek bench peers`.
#[derive(clap::Args)]
pub struct Args {
    /// Systems to measure, one after another: creek, etcd, postgres, redis
    /// (all but creek need a build with `--features peers`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "creek,etcd,postgres,redis"
    )]
    systems: Vec<String>,
    /// Writes timed sequentially for the latency percentiles (per measurement).
    #[arg(long, default_value_t = 3000)]
    latency_ops: usize,
    /// Measured seconds per throughput point.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Client counts for the throughput points.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    clients: Vec<usize>,
    /// Distinct keys written.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 16)]
    value_bytes: usize,
    /// The etcd binary (default: $CREEK_BENCH_ETCD, else where
    /// scripts/bench-peers-setup.sh caches it).
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    #[arg(long)]
    etcd_bin: Option<PathBuf>,
    /// PostgreSQL's bin directory, with initdb, postgres and pg_basebackup
    /// (default: $CREEK_BENCH_PG_BIN, else the newest
    /// /usr/lib/postgresql/*/bin, else initdb's directory on PATH).
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    #[arg(long)]
    pg_bin: Option<PathBuf>,
    /// The redis-server binary (default: $CREEK_BENCH_REDIS, else
    /// redis-server on PATH).
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    #[arg(long)]
    redis_bin: Option<PathBuf>,
    /// The timeout of Redis' `WAIT 2 <timeout>` after each `SET`; a WAIT
    /// that sees fewer replicas counts as a failed write.
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    #[arg(long, default_value_t = 1000)]
    wait_timeout_ms: u64,
    /// Measure failover instead: `creek bench failover`'s rounds on Creek,
    /// then the same rounds on etcd (creek and etcd only; partition is
    /// Creek's alone: etcd has no fault injection).
    #[arg(long)]
    failover: bool,
    /// With --failover: rounds of each fault kind.
    #[arg(long, default_value_t = 5)]
    failover_rounds: usize,
    /// With --failover: the fault kinds, each --failover-rounds times.
    #[arg(long, value_delimiter = ',', default_value = "kill,pause,stop")]
    failover_kinds: Vec<failover::Kind>,
    /// With --failover: closed-loop clients writing beside the probes.
    #[arg(long, default_value_t = 8)]
    load_clients: usize,
    /// With --failover: how long each fault lasts before it is healed.
    #[arg(long, default_value_t = 4.0)]
    hold_secs: f64,
    /// Print one JSON line per system, then the summary line.
    #[arg(long)]
    json: bool,
}

/// The error for systems this build has no driver for.
fn needs_feature(systems: &[&str]) -> String {
    format!(
        "{} {} a creek built with the cargo feature `peers`: run `eval \"$(scripts/bench-peers-setup.sh)\"`, \
         then `cargo run --release -p creek --features peers -- bench peers` (docs/bench/peers.md); \
         `--systems creek` runs without it",
        systems.join(", "),
        if systems.len() == 1 { "needs" } else { "need" }
    )
}

/// Reject unknown, repeated or (without the feature) unbuilt systems and
/// bad numbers before anything starts.
fn validate(args: &Args) -> Result<(), String> {
    if args.systems.is_empty() {
        return Err("--systems names no system".into());
    }
    for (i, s) in args.systems.iter().enumerate() {
        if !SYSTEMS.contains(&s.as_str()) {
            return Err(format!(
                "unknown system {s:?}: --systems takes {}",
                SYSTEMS.join(", ")
            ));
        }
        if args.systems[..i].contains(s) {
            return Err(format!("--systems names {s} twice"));
        }
    }
    if args.failover {
        if let Some(s) = args
            .systems
            .iter()
            .find(|s| !["creek", "etcd"].contains(&s.as_str()))
        {
            return Err(format!(
                "--failover measures creek and etcd only, not {s}: pass --systems creek,etcd"
            ));
        }
        failover_args(args).validate()?;
    }
    if !cfg!(feature = "peers") {
        let others: Vec<&str> = args
            .systems
            .iter()
            .map(String::as_str)
            .filter(|s| *s != "creek")
            .collect();
        if !others.is_empty() {
            return Err(needs_feature(&others));
        }
    }
    if args.clients.is_empty() || args.clients.contains(&0) || args.latency_ops == 0 {
        return Err("--clients and --latency-ops must be positive".into());
    }
    if !(args.seconds > 0.0 && args.seconds.is_finite()) || args.keys == 0 {
        return Err("--seconds and --keys must be positive".into());
    }
    Ok(())
}

/// Creek's line: `creek bench cluster` at 3 replicas on the same settings.
fn creek(args: &Args) -> Result<Map<String, Value>, String> {
    let cluster = cluster::Args {
        replicas: 3,
        shards: 1,
        latency_ops: args.latency_ops,
        seconds: args.seconds,
        clients: args.clients.clone(),
        keys: args.keys,
        value_bytes: args.value_bytes,
        attach: Vec::new(),
        levels: vec!["weak".into(), "strong".into()],
        under_load: 0,
        tls: false,
        compare_tls: false,
        grpc_only: false,
        json: args.json,
    };
    let mut out = cluster::measure(&cluster, true)?;
    out.insert(
        "version".into(),
        json!(format!("creek {}", env!("CARGO_PKG_VERSION"))),
    );
    Ok(out)
}

/// Resolves once Ctrl-C was pressed (never if its watch is gone).
#[cfg(feature = "peers")]
async fn interrupted(mut rx: tokio::sync::watch::Receiver<bool>) {
    if rx.wait_for(|&i| i).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Where the setup script caches etcd: `ETCD_BENCH_CACHE` (default
/// `${XDG_CACHE_HOME:-$HOME/.cache}/creek-bench-etcd`) / `ETCD_VERSION`
/// (default v3.6.14) / `etcd`, as scripts/lib/etcd-build.sh names it.
#[cfg(feature = "peers")]
fn etcd_bin(args: &Args) -> PathBuf {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(p) = args
        .etcd_bin
        .clone()
        .or_else(|| env("CREEK_BENCH_ETCD").map(PathBuf::from))
    {
        return p;
    }
    let cache = env("ETCD_BENCH_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            env("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"))
                .join("creek-bench-etcd")
        });
    let version = env("ETCD_VERSION").unwrap_or_else(|| "v3.6.14".into());
    cache.join(version).join("etcd")
}

/// `name` in a directory of `PATH`, if there.
#[cfg(feature = "peers")]
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// PostgreSQL's bin directory (see `--pg-bin`).
#[cfg(feature = "peers")]
fn pg_bin(args: &Args) -> Result<PathBuf, String> {
    if let Some(p) = args.pg_bin.clone().or_else(|| {
        std::env::var_os("CREEK_BENCH_PG_BIN")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }) {
        return Ok(p);
    }
    // Debian keeps the server off PATH, one directory per major version.
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin);
    newest
        .or_else(|| on_path("initdb").and_then(|p| p.parent().map(PathBuf::from)))
        .ok_or_else(|| {
            "no PostgreSQL server found (initdb): run scripts/bench-peers-setup.sh, or pass --pg-bin"
                .to_string()
        })
}

/// One peer system's report, started, measured and stopped on `rt`.
#[cfg(feature = "peers")]
fn peer(
    rt: &tokio::runtime::Runtime,
    system: &str,
    args: &Args,
    interrupt: &tokio::sync::watch::Receiver<bool>,
) -> Result<Map<String, Value>, String> {
    let settings = Settings {
        latency_ops: args.latency_ops,
        seconds: args.seconds,
        clients: args.clients.clone(),
        keys: args.keys,
        value_bytes: args.value_bytes,
    };
    let interrupt = interrupt.clone();
    rt.block_on(async {
        let work = async {
            match system {
                "etcd" => etcd::measure(&settings, &etcd_bin(args)).await,
                "postgres" => postgres::measure(&settings, &pg_bin(args)?).await,
                "redis" => {
                    let bin = args
                        .redis_bin
                        .clone()
                        .or_else(|| std::env::var_os("CREEK_BENCH_REDIS").map(PathBuf::from))
                        .or_else(|| on_path("redis-server"))
                        .unwrap_or_else(|| PathBuf::from("redis-server"));
                    redis::measure(&settings, &bin, args.wait_timeout_ms).await
                }
                other => Err(format!("unknown system {other:?}")),
            }
        };
        // Dropping `work` stops the system's processes and removes its
        // directory.
        tokio::select! {
            r = work => r,
            () = interrupted(interrupt) => Err("interrupted".to_string()),
        }
    })
}

/// The ratios of the summary line, for the systems in `results`: Creek's
/// strong p50 to etcd's put p50 and to PostgreSQL's write p50, Creek's
/// strong throughput at 64 clients to etcd's, and Creek's weak p50, p99
/// and throughput at 64 clients to Redis' SET's. A ratio whose systems did
/// not both run is left out; one whose numbers are missing (no 64-client
/// point) or zero is `null`.
fn ratios(results: &Map<String, Value>) -> Map<String, Value> {
    const P50: &[&str] = &["p50_us"];
    const P99: &[&str] = &["p99_us"];
    const OPS64: &[&str] = &["throughput_ops_per_sec", "clients_64"];
    // (ratio, Creek's level, peer, peer's measurement, the number in each)
    let defs: [(&str, &str, &str, &str, &[&str]); 6] = [
        ("strong_p50_vs_etcd_put_p50", "strong", "etcd", "put", P50),
        (
            "strong_p50_vs_pg_write_p50",
            "strong",
            "postgres",
            "write",
            P50,
        ),
        ("strong_ops64_vs_etcd_ops64", "strong", "etcd", "put", OPS64),
        ("weak_p50_vs_redis_set_p50", "weak", "redis", "set", P50),
        ("weak_p99_vs_redis_set_p99", "weak", "redis", "set", P99),
        ("weak_ops64_vs_redis_ops64", "weak", "redis", "set", OPS64),
    ];
    let mut out = Map::new();
    for (name, level, peer, measurement, path) in defs {
        let (Some(creek), Some(other)) = (results.get("creek"), results.get(peer)) else {
            continue;
        };
        let number = |root: &Value, first: &str| {
            path.iter()
                .try_fold(root.get(first)?, |v, k| v.get(k))
                .and_then(Value::as_f64)
        };
        let ratio = match (number(creek, level), number(other, measurement)) {
            (Some(a), Some(b)) if b > 0.0 => json!((a / b * 1000.0).round() / 1000.0),
            _ => Value::Null,
        };
        out.insert(name.into(), ratio);
    }
    out
}

/// Where Creek means to be against its peers (docs/bench/peers.md,
/// "Targets"): (ratio, at most, at least).
const TARGETS: [(&str, Option<f64>, Option<f64>); 5] = [
    ("weak_p50_vs_redis_set_p50", Some(1.5), None),
    ("weak_p99_vs_redis_set_p99", Some(3.0), None),
    ("weak_ops64_vs_redis_ops64", None, Some(0.5)),
    ("strong_p50_vs_etcd_put_p50", Some(0.5), None),
    ("strong_ops64_vs_etcd_ops64", None, Some(2.0)),
];

/// The summary line's `targets`: for each target whose ratio was formed,
/// the ratio, the target (`"<= 1.5"`, `">= 2"`) and whether it was met
/// (`null` when the ratio is).
fn targets(ratios: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, at_most, at_least) in TARGETS {
        let Some(ratio) = ratios.get(name) else {
            continue;
        };
        let (target, met) = match (at_most, at_least) {
            (Some(max), _) => (format!("<= {max}"), ratio.as_f64().map(|r| r <= max)),
            (None, Some(min)) => (format!(">= {min}"), ratio.as_f64().map(|r| r >= min)),
            (None, None) => continue,
        };
        out.insert(
            name.into(),
            json!({"ratio": ratio, "target": target, "met": met}),
        );
    }
    out
}

/// `creek bench failover`'s arguments for `--failover`.
fn failover_args(args: &Args) -> failover::Args {
    failover::Args {
        rounds: args.failover_rounds,
        kinds: args.failover_kinds.clone(),
        load_clients: args.load_clients,
        hold_secs: args.hold_secs,
        keep: false,
        json: args.json,
    }
}

/// The summary of `--failover`: each system's summary, and per fault kind
/// Creek's failover p50 and p99 over etcd's (`null` where either is
/// missing or zero).
fn failover_summary(summaries: &Map<String, Value>) -> Value {
    let mut ratios = Map::new();
    if let (Some(creek), Some(etcd)) = (summaries.get("creek"), summaries.get("etcd")) {
        for kind in [
            failover::Kind::Kill,
            failover::Kind::Pause,
            failover::Kind::Stop,
        ] {
            for p in ["p50", "p99"] {
                let field = format!("failover_ms_{p}");
                let get = |s: &Value| s.get(kind.name())?.get(&field)?.as_f64();
                if creek.get(kind.name()).is_none() || etcd.get(kind.name()).is_none() {
                    continue;
                }
                let ratio = match (get(creek), get(etcd)) {
                    (Some(a), Some(b)) if b > 0.0 => json!((a / b * 1000.0).round() / 1000.0),
                    _ => Value::Null,
                };
                ratios.insert(format!("{}_{p}_vs_etcd", kind.name()), ratio);
            }
        }
    }
    let mut out = Map::new();
    out.insert("summary".into(), json!("peers_failover"));
    out.insert("ratios".into(), Value::Object(ratios));
    out.extend(summaries.clone());
    Value::Object(out)
}

/// `--failover`: each system's rounds, one after the other, then the
/// summary. A system stopped early is reported all the same, and makes
/// the run fail once every system ran.
fn run_failover(args: &Args) -> Result<(), String> {
    let fo = failover_args(args);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut summaries = Map::new();
    let mut failed = None;
    for system in &args.systems {
        eprintln!("bench peers --failover: {system}…");
        let work = async {
            match system.as_str() {
                "creek" => failover::measure(&fo).await,
                #[cfg(feature = "peers")]
                "etcd" => etcd_failover::measure(&etcd_bin(args), &fo).await,
                other => Err(needs_feature(&[other])),
            }
        };
        let (mut lines, stopped) = rt.block_on(async {
            tokio::select! {
                r = work => r,
                _ = tokio::signal::ctrl_c() => Err("interrupted".to_string()),
            }
        })?;
        let summary = lines.pop().unwrap_or(Value::Null);
        for line in &lines {
            crate::print_report(line, args.json)?;
        }
        summaries.insert(system.clone(), summary);
        failed = failed.or(stopped.map(|e| format!("{system}: {e}")));
    }
    crate::print_report(&failover_summary(&summaries), args.json)?;
    failed.map_or(Ok(()), Err)
}

/// Run the benchmark.
pub fn run(args: &Args) -> Result<(), String> {
    validate(args)?;
    if args.failover {
        return run_failover(args);
    }
    // Ctrl-C, watched for the whole run: the system being measured stops
    // and its directory goes (Creek's run listens for it itself).
    #[cfg(feature = "peers")]
    let (rt, interrupt) = {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let (tx, rx) = tokio::sync::watch::channel(false);
        rt.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = tx.send(true);
            }
            std::future::pending::<()>().await;
        });
        (rt, rx)
    };
    let mut results = Map::new();
    for system in &args.systems {
        #[cfg(feature = "peers")]
        if *interrupt.borrow() {
            return Err("interrupted".into());
        }
        eprintln!("bench peers: {system}…");
        let report = match system.as_str() {
            "creek" => creek(args)?,
            #[cfg(feature = "peers")]
            other => peer(&rt, other, args, &interrupt)?,
            #[cfg(not(feature = "peers"))]
            other => return Err(needs_feature(&[other])),
        };
        let mut line = Map::new();
        line.insert("system".into(), json!(system));
        line.insert("value_bytes".into(), json!(args.value_bytes));
        line.insert("keys".into(), json!(args.keys));
        line.insert(
            "cores".into(),
            json!(std::thread::available_parallelism().map_or(1, |n| n.get())),
        );
        line.extend(report);
        line.remove("bench");
        let line = Value::Object(line);
        crate::print_report(&line, args.json)?;
        results.insert(system.clone(), line);
    }
    let mut summary = Map::new();
    let ratios = ratios(&results);
    summary.insert("targets".into(), Value::Object(targets(&ratios)));
    summary.insert("ratios".into(), Value::Object(ratios));
    summary.extend(results);
    crate::print_report(&Value::Object(summary), args.json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(p50: u64, ops64: Option<u64>) -> Value {
        let mut tput = Map::new();
        tput.insert("clients_1".into(), json!(100));
        if let Some(o) = ops64 {
            tput.insert("clients_64".into(), json!(o));
        }
        json!({"p50_us": p50, "p99_us": p50 * 3, "throughput_ops_per_sec": tput})
    }

    fn results(systems: &[&str], ops64: bool) -> Map<String, Value> {
        let o = |n| ops64.then_some(n);
        let mut r = Map::new();
        for s in systems {
            let v = match *s {
                "creek" => json!({"weak": level(200, o(20_000)), "strong": level(1500, o(6000))}),
                "etcd" => json!({"put": level(1000, o(4000))}),
                "postgres" => json!({"write": level(3000, o(2000))}),
                "redis" => json!({"set": level(50, o(40_000)), "set_wait2": level(120, o(30_000))}),
                _ => unreachable!(),
            };
            r.insert((*s).into(), v);
        }
        r
    }

    #[test]
    fn ratios_divide_creeks_numbers_by_each_peers() {
        let r = ratios(&results(&SYSTEMS, true));
        assert_eq!(r["strong_p50_vs_etcd_put_p50"], json!(1.5));
        assert_eq!(r["strong_p50_vs_pg_write_p50"], json!(0.5));
        assert_eq!(r["strong_ops64_vs_etcd_ops64"], json!(1.5));
        assert_eq!(r["weak_p50_vs_redis_set_p50"], json!(4.0));
        assert_eq!(r["weak_p99_vs_redis_set_p99"], json!(4.0));
        assert_eq!(r["weak_ops64_vs_redis_ops64"], json!(0.5));
        assert_eq!(r.len(), 6);
    }

    #[test]
    fn targets_say_whether_each_ratio_meets_its_bound() {
        let t = targets(&ratios(&results(&SYSTEMS, true)));
        assert_eq!(t.len(), 5);
        let met = |name: &str| t[name]["met"].clone();
        // Weak p50 4.0 against <= 1.5: missed; weak throughput 0.5 against
        // >= 0.5: met (the bound is inclusive).
        assert_eq!(met("weak_p50_vs_redis_set_p50"), json!(false));
        assert_eq!(t["weak_p50_vs_redis_set_p50"]["target"], json!("<= 1.5"));
        assert_eq!(met("weak_ops64_vs_redis_ops64"), json!(true));
        assert_eq!(t["strong_ops64_vs_etcd_ops64"]["target"], json!(">= 2"));
        assert_eq!(met("strong_ops64_vs_etcd_ops64"), json!(false));
        // Without a 64-client point the throughput targets are unknown.
        let t = targets(&ratios(&results(&SYSTEMS, false)));
        assert_eq!(t["strong_ops64_vs_etcd_ops64"]["met"], Value::Null);
        assert_eq!(t["weak_p50_vs_redis_set_p50"]["met"], json!(false));
        // Only Creek: no target can be judged.
        assert!(targets(&ratios(&results(&["creek"], true))).is_empty());
    }

    #[test]
    fn ratios_name_only_systems_that_ran() {
        assert!(ratios(&results(&["creek"], true)).is_empty());
        assert!(ratios(&results(&["etcd", "postgres", "redis"], true)).is_empty());
        let r = ratios(&results(&["creek", "redis"], true));
        assert_eq!(
            r.keys().collect::<Vec<_>>(),
            [
                "weak_ops64_vs_redis_ops64",
                "weak_p50_vs_redis_set_p50",
                "weak_p99_vs_redis_set_p99"
            ]
        );
    }

    #[test]
    fn a_ratio_without_its_numbers_is_null() {
        // No 64-client point: the throughput ratio cannot be formed.
        let r = ratios(&results(&["creek", "etcd"], false));
        assert_eq!(r["strong_ops64_vs_etcd_ops64"], Value::Null);
        assert_eq!(r["strong_p50_vs_etcd_put_p50"], json!(1.5));
        // A zero denominator is no ratio either.
        let mut z = results(&["creek", "etcd"], true);
        z["etcd"]["put"]["p50_us"] = json!(0);
        assert_eq!(ratios(&z)["strong_p50_vs_etcd_put_p50"], Value::Null);
    }

    #[test]
    fn ratios_round_to_three_decimals() {
        let mut r = results(&["creek", "etcd"], true);
        r["etcd"]["put"]["p50_us"] = json!(3000);
        assert_eq!(ratios(&r)["strong_p50_vs_etcd_put_p50"], json!(0.5));
        r["etcd"]["put"]["p50_us"] = json!(7000);
        assert_eq!(ratios(&r)["strong_p50_vs_etcd_put_p50"], json!(0.214));
    }

    fn args(systems: &[&str]) -> Args {
        Args {
            systems: systems.iter().map(|s| (*s).to_owned()).collect(),
            latency_ops: 10,
            seconds: 0.1,
            clients: vec![1],
            keys: 10,
            value_bytes: 16,
            etcd_bin: None,
            pg_bin: None,
            redis_bin: None,
            wait_timeout_ms: 1000,
            failover: false,
            failover_rounds: 1,
            failover_kinds: vec![failover::Kind::Kill],
            load_clients: 0,
            hold_secs: 1.0,
            json: true,
        }
    }

    #[test]
    fn failover_compares_creek_and_etcd_only_and_divides_per_kind() {
        let mut a = args(&["creek", "redis"]);
        a.failover = true;
        let e = validate(&a).err().unwrap_or_default();
        assert!(e.contains("not redis"), "{e}");
        a.systems = vec!["creek".into()];
        a.failover_rounds = 0;
        assert!(validate(&a).is_err(), "rounds are checked");
        let mut s = Map::new();
        s.insert(
            "creek".into(),
            json!({"kill": {"failover_ms_p50": 150, "failover_ms_p99": 300}}),
        );
        s.insert(
            "etcd".into(),
            json!({"kill": {"failover_ms_p50": 1200, "failover_ms_p99": 0}}),
        );
        let out = failover_summary(&s);
        assert_eq!(out["ratios"]["kill_p50_vs_etcd"], json!(0.125));
        assert_eq!(out["ratios"]["kill_p99_vs_etcd"], Value::Null);
        assert!(out["ratios"].get("pause_p50_vs_etcd").is_none());
        assert_eq!(out["creek"]["kill"]["failover_ms_p50"], json!(150));
    }

    #[test]
    fn unknown_and_repeated_systems_are_refused_before_anything_starts() {
        let e = validate(&args(&["creek", "mysql"]))
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("mysql") && e.contains("creek, etcd, postgres, redis"),
            "{e}"
        );
        let e = validate(&args(&["creek", "creek"]))
            .err()
            .unwrap_or_default();
        assert!(e.contains("twice"), "{e}");
        assert!(validate(&args(&["creek"])).is_ok());
    }

    #[cfg(not(feature = "peers"))]
    #[test]
    fn without_the_feature_a_peer_system_names_the_feature_and_the_script() {
        let e = validate(&args(&["creek", "etcd", "redis"]))
            .err()
            .unwrap_or_default();
        assert!(e.starts_with("etcd, redis need"), "{e}");
        assert!(e.contains("feature `peers`"), "{e}");
        assert!(e.contains("scripts/bench-peers-setup.sh"), "{e}");
    }

    #[cfg(feature = "peers")]
    #[test]
    fn with_the_feature_every_system_is_accepted() {
        assert!(validate(&args(&SYSTEMS)).is_ok());
    }
}
