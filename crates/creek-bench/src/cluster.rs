//! `creek bench cluster`: start a local cluster of `creek serve` processes
//! on loopback (no injected delay), measure client-observed latency at one
//! client and throughput at several client counts, for weak and strong ops,
//! and print one JSON object.
//!
//! Weak ops are timed to their preliminary view, strong ops (levels
//! `[strong]`) to their final view. Latency runs at one client connected to
//! the leader; throughput runs closed-loop clients spread round-robin over
//! the replicas, each with its own connection, after a warm-up.
//!
//! Levels `read-weak`, `read-snapshot` and `read-strong` time a `kv.get`
//! to its one view at that level (the snapshot view: the committed state,
//! without consensus; docs/snapshot-reads.md).
//!
//! With `--shards 2` or more, level `mpo` measures operations across
//! shards: a strong `kv.mput` of two keys on different shards, timed to
//! its final view, beside `strong`'s single-shard `kv.put`
//! (docs/cross-shard.md).
//!
//! `--tls` starts the cluster with TLS on its client and peer links
//! (certificates made as `creek certs create-local` makes them, in the
//! cluster's temporary directory) and connects every client over TLS;
//! `--compare-tls` measures a plaintext cluster and then a TLS one, each
//! started fresh, and reports both with the ratios of their p50s.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use creek_client::{Client, Cluster, ConnectOptions, Levels, ShardMap, TlsOptions};

use crate::driver::{self, Conn};
use crate::servers::Target;
use crate::stages;
use creek_types::value::Value;
use serde_json::json;

/// Arguments of `creek bench cluster`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Replicas in the cluster (in each shard, with `--shards`).
    #[arg(long, default_value_t = 3)]
    pub(crate) replicas: usize,
    /// Shards: a sharded cluster (keys hashed over the shards), measured
    /// through `creek_client::Cluster`, which routes each op to the shard
    /// owning its key (the cost of routing: compare with one shard).
    #[arg(long, default_value_t = 1, conflicts_with = "attach")]
    pub(crate) shards: usize,
    /// Ops timed sequentially for the latency percentiles (per level).
    #[arg(long, default_value_t = 3000)]
    pub(crate) latency_ops: usize,
    /// Measured seconds per throughput point.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) seconds: f64,
    /// Client counts for the throughput points.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub(crate) clients: Vec<usize>,
    /// Distinct keys written.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 16)]
    pub(crate) value_bytes: usize,
    /// Measure a running cluster at these client addresses instead of
    /// starting one (e.g. `creek dev`'s 127.0.0.1:7001,127.0.0.1:7002,…).
    #[arg(long, value_delimiter = ',')]
    pub(crate) attach: Vec<SocketAddr>,
    /// Levels to measure: weak, strong, and with --shards 2 or more mpo
    /// (a strong two-key write across shards); weak-local, weak-majority
    /// (a weak write answered once durable at its replica, or at a
    /// majority: `--durability`); read-weak, read-snapshot, read-strong (a
    /// `kv.get` to its view at that level).
    #[arg(long, value_delimiter = ',', default_value = "weak,strong")]
    pub(crate) levels: Vec<String>,
    /// Then weak latency again while this many clients write strong ops
    /// (0: not measured): whether weak ops wait behind replication work.
    #[arg(long, default_value_t = 16)]
    pub(crate) under_load: usize,
    /// Start the cluster with TLS on client and peer links (mutual TLS,
    /// certificates made in its temporary directory) and connect every
    /// client over TLS. Not with --attach.
    #[arg(long, conflicts_with = "attach")]
    pub(crate) tls: bool,
    /// Measure a plaintext cluster, then a TLS one (each started fresh),
    /// and print both with the TLS/plaintext ratios of the p50s.
    #[arg(long, conflicts_with_all = ["attach", "tls"])]
    pub(crate) compare_tls: bool,
    /// Invoke over gRPC (the client's `grpc_only`) instead of Creek's
    /// native protocol.
    #[arg(long)]
    pub(crate) grpc_only: bool,
    /// Print one JSON line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The index of the replica that reports itself leader (waits up to 30 s),
/// connecting over TLS with `tls` if given.
pub(crate) async fn find_leader(
    addrs: &[SocketAddr],
    tls: Option<&TlsOptions>,
) -> Result<usize, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        for (i, a) in addrs.iter().enumerate() {
            if let Ok(c) = Client::connect_with([a.to_string()], tls.cloned()).await {
                if let Ok(s) = c.status().await {
                    if s.role == "leader" {
                        return Ok(i);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the cluster elected no leader within 30 s".into())
}

/// One Creek client connection, writing at one level: weak ops timed to
/// their preliminary view, strong ops to their final view.
struct CreekConn {
    client: Via,
    op: Op,
}

/// What a connection writes.
#[derive(Clone)]
enum Op {
    /// `kv.put`, weak, answered as the durability says.
    Weak(creek_client::Durability),
    /// `kv.put`, strong.
    Strong,
    /// `kv.mput` of two keys on different shards of the map, strong.
    Across(std::sync::Arc<ShardMap>),
    /// `kv.get` at one level, to its one view.
    Read(Levels),
}

impl Op {
    fn of(level: &str, map: Option<&ShardMap>) -> Result<Op, String> {
        match (level, map) {
            ("weak", _) => Ok(Op::Weak(creek_client::Durability::None)),
            ("weak-local", _) => Ok(Op::Weak(creek_client::Durability::Local)),
            ("weak-majority", _) => Ok(Op::Weak(creek_client::Durability::Majority)),
            ("strong", _) => Ok(Op::Strong),
            ("mpo", Some(map)) => Ok(Op::Across(std::sync::Arc::new(map.clone()))),
            ("mpo", None) => Err("level mpo needs --shards 2 or more".into()),
            ("read-weak", _) => Ok(Op::Read(Levels::Weak)),
            ("read-snapshot", _) => Ok(Op::Read(Levels::Snapshot)),
            ("read-strong", _) => Ok(Op::Read(Levels::Strong)),
            (other, _) => Err(format!(
                "unknown level {other}: weak, weak-local, weak-majority, strong, mpo, read-weak, \
                 read-snapshot or read-strong"
            )),
        }
    }
}

/// Key `n`'s partner on another shard of `map`: the next key number
/// whose owner differs.
fn partner(map: &ShardMap, n: u64) -> Result<String, String> {
    let owner = map.owner(None, driver::key(n).as_bytes());
    (1..256)
        .map(|d| driver::key(n + d))
        .find(|k| map.owner(None, k.as_bytes()) != owner)
        .ok_or_else(|| "no key on another shard".to_owned())
}

/// A client of one replica, or of one replica in each shard (routing by
/// key).
enum Via {
    One(Client),
    Routed(Cluster),
}

/// A benchmark client's options: without the client cache, which follows
/// every weak write to its final view (one more frame per write, for
/// read-your-writes at the snapshot level); the benchmark measures the
/// replicas' cost of each level.
fn bench_options(tls: Option<&TlsOptions>, grpc_only: bool) -> ConnectOptions {
    ConnectOptions {
        tls: tls.cloned(),
        grpc_only,
        cache: false,
        ..ConnectOptions::default()
    }
}

impl CreekConn {
    async fn connect(addr: SocketAddr, options: &ConnectOptions, op: Op) -> Result<Self, String> {
        let client = Client::connect_with_options([addr.to_string()], options.clone())
            .await
            .map_err(|e| e.to_string())?;
        Ok(CreekConn {
            client: Via::One(client),
            op,
        })
    }

    /// A routing client that talks to one replica of each shard: the one
    /// `pick` chooses among the shard's (by id).
    async fn routed(
        map: &ShardMap,
        options: &ConnectOptions,
        op: Op,
        pick: impl Fn(&[u16]) -> u16,
    ) -> Result<Self, String> {
        let mut one_each = map.clone();
        for shard in one_each.shards.values_mut() {
            let ids: Vec<u16> = shard.replicas.keys().copied().collect();
            let keep = pick(&ids);
            shard.replicas.retain(|id, _| *id == keep);
        }
        let cluster = Cluster::connect_with_map(one_each, options.clone())
            .await
            .map_err(|e| e.to_string())?;
        Ok(CreekConn {
            client: Via::Routed(cluster),
            op,
        })
    }
}

impl Conn for CreekConn {
    async fn write(&mut self, n: u64, value: &[u8]) -> Result<(), String> {
        let bytes = |s: String| Value::Bytes(s.into_bytes().into());
        let value = Value::Bytes(value.to_vec().into());
        let (procedure, args) = match &self.op {
            Op::Across(map) => (
                "kv.mput",
                vec![
                    Value::List(vec![bytes(driver::key(n)), bytes(partner(map, n)?)]),
                    Value::List(vec![value.clone(), value]),
                ],
            ),
            Op::Read(_) => ("kv.get", vec![bytes(driver::key(n))]),
            _ => ("kv.put", vec![bytes(driver::key(n)), value]),
        };
        let (levels, strong, durability) = match self.op {
            Op::Weak(durability) => (Levels::Weak, false, durability),
            Op::Read(levels) => (levels, true, creek_client::Durability::None),
            _ => (Levels::Strong, true, creek_client::Durability::None),
        };
        let options = creek_client::CallOptions {
            durability,
            ..Default::default()
        };
        let op = match &self.client {
            Via::One(c) => c.invoke_with(procedure, args, levels, options).await,
            Via::Routed(c) => c.invoke_with(procedure, args, levels, options).await,
        }
        .map_err(|e| e.to_string())?;
        if strong {
            op.final_view().await.map_err(|e| e.to_string())?;
        } else {
            op.preliminary().await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// Seconds the idle processes are watched for their background CPU.
const IDLE_SECS: u64 = 2;

/// CPU time (user and system) the processes `pids` used so far, in
/// microseconds, from `/proc` (none where it cannot be read).
fn cpu_us(pids: &[u32]) -> Option<f64> {
    // Clock ticks per second of /proc's times: 100 on Linux.
    const TICKS_PER_SEC: f64 = 100.0;
    let mut ticks = 0u64;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After the command's closing parenthesis: fields 3.. (utime is
        // field 14, stime 15).
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        ticks += fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    }
    Some(ticks as f64 / TICKS_PER_SEC * 1e6)
}

/// Run the benchmark.
pub fn run(args: &Args) -> Result<(), String> {
    let out = if args.compare_tls {
        compare_tls(args)?
    } else {
        measure(args, false)?
    };
    crate::print_report(&serde_json::Value::Object(out), args.json)
}

/// `--compare-tls`: a plaintext cluster measured, then a TLS one, and the
/// ratios of their p50s (TLS over plaintext; null for a level not
/// measured).
fn compare_tls(args: &Args) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let plain = measure(
        &Args {
            tls: false,
            ..args.clone()
        },
        false,
    )?;
    let tls = measure(
        &Args {
            tls: true,
            ..args.clone()
        },
        false,
    )?;
    let ratio = |level: &str| {
        let p50 =
            |r: &serde_json::Map<String, serde_json::Value>| r.get(level)?.get("p50_us")?.as_f64();
        match (p50(&plain), p50(&tls)) {
            (Some(p), Some(t)) if p > 0.0 => json!((t / p * 1000.0).round() / 1000.0),
            _ => json!(null),
        }
    };
    let mut out = serde_json::Map::new();
    out.insert("bench".into(), json!("cluster"));
    out.insert(
        "ratios".into(),
        json!({
            "strong_p50_tls_vs_plain": ratio("strong"),
            "weak_p50_tls_vs_plain": ratio("weak"),
        }),
    );
    out.insert("plain".into(), json!(plain));
    out.insert("tls".into(), json!(tls));
    Ok(out)
}

/// Start the cluster (or attach), measure it and stop it: the report
/// `creek bench cluster` prints, also `creek bench peers`' Creek line.
/// `interruptible`: Ctrl-C ends the measurement with an error, so the
/// servers and their directory go (the caller listens for Ctrl-C).
pub(crate) fn measure(
    args: &Args,
    interruptible: bool,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    if args.replicas == 0 || args.clients.is_empty() || args.latency_ops == 0 {
        return Err("--replicas, --clients and --latency-ops must be positive".into());
    }
    if args.shards == 0 || args.shards > 8 {
        return Err("--shards must be within 1..=8".into());
    }
    let target = Target::start_or_attach(args.replicas, args.shards, &args.attach, args.tls)?;
    let pids = target.pids();
    let map = match &target.servers {
        Some(s) if args.shards > 1 => {
            let bytes = std::fs::read(s.dir.join("shard-map.bin")).map_err(|e| e.to_string())?;
            Some(creek_shard::decode(&bytes.into()).map_err(|e| e.to_string())?)
        }
        _ => None,
    };
    for level in &args.levels {
        Op::of(level, map.as_ref())?;
    }
    let clients = target.clients.clone();
    let metrics = target.metrics.clone();
    let tls = target.tls.clone();
    let tls = tls.as_ref();
    let options = &bench_options(tls, args.grpc_only);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let value = vec![b'v'; args.value_bytes];
    let measured = async {
        let leader = find_leader(&clients, tls).await?;
        // Each shard's leader, for the latency client (as one shard's
        // latency client talks to its leader).
        let mut leaders: Vec<u16> = Vec::new();
        if let Some(map) = &map {
            for shard in map.shards.values() {
                let addrs: Vec<SocketAddr> = shard
                    .replicas
                    .values()
                    .filter_map(|e| e.client.parse().ok())
                    .collect();
                let i = find_leader(&addrs, tls).await?;
                leaders.extend(shard.replicas.keys().nth(i));
            }
        }
        let clients = &clients;
        let latency_conn = |op: Op| {
            let (map, leaders) = (&map, &leaders);
            async move {
                match map {
                    Some(map) => {
                        CreekConn::routed(map, options, op, |ids| {
                            ids.iter()
                                .copied()
                                .find(|id| leaders.contains(id))
                                .unwrap_or(ids[0])
                        })
                        .await
                    }
                    None => CreekConn::connect(clients[leader], options, op).await,
                }
            }
        };
        let load_conn = |i: usize, op: Op| {
            let map = &map;
            async move {
                match map {
                    Some(map) => {
                        CreekConn::routed(map, options, op, |ids| ids[i % ids.len()]).await
                    }
                    None => CreekConn::connect(clients[i % clients.len()], options, op).await,
                }
            }
        };
        // What the processes burn with no load (ticks, heartbeats, gossip),
        // so the cost per op can be told apart from the cost of running
        // more processes (a sharded cluster runs several groups).
        eprintln!("bench cluster: idle CPU over {IDLE_SECS} s…");
        let idle_before = cpu_us(&pids);
        tokio::time::sleep(Duration::from_secs(IDLE_SECS)).await;
        let idle_per_sec = match (idle_before, cpu_us(&pids)) {
            (Some(b), Some(a)) => Some((a - b) / IDLE_SECS as f64),
            _ => None,
        };
        let mut levels = serde_json::Map::new();
        // The leader's stage timings over the timed ops (a cluster this
        // command started serves `/metrics`; an attached one may not).
        let scrape = || async {
            match metrics.get(leader) {
                Some(&m) => stages::scrape(m, tls).await.map(Some),
                None => Ok(None),
            }
        };
        for name in [
            "weak",
            "weak-local",
            "weak-majority",
            "strong",
            "mpo",
            "read-weak",
            "read-snapshot",
            "read-strong",
        ] {
            if !args.levels.iter().any(|l| l == name) {
                continue;
            }
            let op = Op::of(name, map.as_ref())?;
            eprintln!("bench cluster: {name} latency at 1 client…");
            let before = scrape().await?;
            let conn = latency_conn(op.clone()).await?;
            let (p50, p99) = driver::latency(conn, args.latency_ops, args.keys, &value).await?;
            let stages = match (before, scrape().await?) {
                // An MPO's stages are a strong op's, at the shard's leader.
                // Local reads (weak, snapshot) have no stages.
                (Some(b), Some(a)) if !matches!(name, "read-weak" | "read-snapshot") => {
                    let level = if name.starts_with("weak") {
                        "weak"
                    } else {
                        "strong"
                    };
                    json!(stages::medians(&b, &a, level))
                }
                _ => json!(null),
            };
            let mut tput = serde_json::Map::new();
            let mut cpu = serde_json::Map::new();
            let mut cpu_net = serde_json::Map::new();
            for &n in &args.clients {
                eprintln!("bench cluster: {name} throughput at {n} clients…");
                let mut conns = Vec::with_capacity(n);
                for i in 0..n {
                    conns.push(load_conn(i, op.clone()).await?);
                }
                let label = format!("creek {name}");
                let before = cpu_us(&pids);
                let t = driver::throughput(conns, args.seconds, args.keys, &value, &label).await?;
                let after = cpu_us(&pids);
                let ops = t * args.seconds;
                let per_op = match (before, after) {
                    (Some(b), Some(a)) if t > 0.0 => json!(((a - b) / ops).round()),
                    _ => json!(null),
                };
                let net = match (before, after, idle_per_sec) {
                    (Some(b), Some(a), Some(idle)) if t > 0.0 => {
                        json!(((a - b - idle * args.seconds) / ops).round())
                    }
                    _ => json!(null),
                };
                tput.insert(format!("clients_{n}"), json!(t.round()));
                cpu.insert(format!("clients_{n}"), per_op);
                cpu_net.insert(format!("clients_{n}"), net);
            }
            levels.insert(
                name.to_owned(),
                json!({
                    "p50_us": p50,
                    "p99_us": p99,
                    "stages_us": stages,
                    "throughput_ops_per_sec": tput,
                    "server_cpu_us_per_op": cpu,
                    "server_cpu_us_per_op_net_of_idle": cpu_net,
                }),
            );
        }
        if args.under_load > 0 {
            eprintln!(
                "bench cluster: weak latency at 1 client under {} strong clients…",
                args.under_load
            );
            let mut load = Vec::with_capacity(args.under_load);
            for i in 0..args.under_load {
                load.push(load_conn(i, Op::Strong).await?);
            }
            let weak = latency_conn(Op::Weak(creek_client::Durability::None)).await?;
            let before = scrape().await?;
            let timed = driver::latency(weak, args.latency_ops, args.keys, &value);
            let (strong_tput, weak_latency) =
                driver::throughput_during(load, args.keys, &value, "creek strong load", timed)
                    .await?;
            let (p50, p99) = weak_latency?;
            let stages = match (before, scrape().await?) {
                (Some(b), Some(a)) => json!(stages::medians(&b, &a, "weak")),
                _ => json!(null),
            };
            levels.insert(
                "weak_under_strong_load".into(),
                json!({
                    "strong_clients": args.under_load,
                    "strong_ops_per_sec": strong_tput.round(),
                    "p50_us": p50,
                    "p99_us": p99,
                    "stages_us": stages,
                }),
            );
        }
        levels.insert(
            "idle_cpu_us_per_sec".into(),
            json!(idle_per_sec.map(f64::round)),
        );
        Ok::<_, String>(levels)
    };
    let report = rt.block_on(async {
        tokio::select! {
            r = measured => r,
            _ = tokio::signal::ctrl_c(), if interruptible => Err("interrupted".to_string()),
        }
    })?;
    drop(target);
    let mut out = serde_json::Map::new();
    out.insert("bench".into(), json!("cluster"));
    out.insert("replicas".into(), json!(clients.len()));
    out.insert("shards".into(), json!(args.shards));
    out.insert("value_bytes".into(), json!(args.value_bytes));
    out.insert("tls".into(), json!(args.tls));
    out.insert("grpc_only".into(), json!(args.grpc_only));
    out.insert(
        "cores".into(),
        json!(std::thread::available_parallelism().map_or(1, |n| n.get())),
    );
    out.extend(report);
    Ok(out)
}
