//! `creek serve` (one replica) and `creek dev` (a local cluster in one
//! process).
//!
//! Both run until Ctrl-C or SIGTERM, or until a replica fails (its node
//! loop panics, a write fails, consensus finds lost data) or any thread of
//! the process panics: then the cause is logged as an ERROR and the process
//! exits non-zero, so that a supervisor restarts it or alerts. A process
//! that stayed up refusing every request would hide the failure.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::task::Poll;
use std::time::Duration;

use creek_core::ReplicaId;
use creek_server::{Fatal, ReplicaAddr, Server, ServerConfig};
use tokio::sync::watch;

/// How long a failed process waits for its replicas to stop before it
/// exits anyway (a failed disk may not answer at all).
const STOP_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// `creek serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file (see docs/operations.md); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// This replica's id.
    #[arg(long)]
    id: Option<u16>,
    /// A replica of the group, as ID=PEER_ADDR,CLIENT_ADDR (repeat for each,
    /// this one included); replaces the file's list.
    #[arg(long = "replica", value_name = "ID=PEER,CLIENT")]
    replicas: Vec<String>,
    /// Data directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Serve Prometheus metrics on this address.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Execution worker threads (0: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Protocol tick in milliseconds.
    #[arg(long)]
    tick_ms: Option<u64>,
    /// Accept Admin.SetFaults (tests and benchmarks only).
    #[arg(long)]
    allow_fault_injection: bool,
    /// After a majority lost their data directories: rebuild this lost
    /// replica from the replicas left anyway (ops only the lost replicas
    /// acknowledged are gone for good).
    #[arg(long)]
    rebuild_despite_data_loss: bool,
}

fn parse_replica(s: &str) -> Result<ReplicaAddr, String> {
    let err = || format!("--replica {s:?}: expected ID=PEER_ADDR,CLIENT_ADDR");
    let (id, addrs) = s.split_once('=').ok_or_else(err)?;
    let (peer, client) = addrs.split_once(',').ok_or_else(err)?;
    Ok(ReplicaAddr {
        id: id.trim().parse().map_err(|_| err())?,
        peer_addr: peer.trim().parse().map_err(|_| err())?,
        client_addr: client.trim().parse().map_err(|_| err())?,
    })
}

impl ServeArgs {
    fn config(&self) -> Result<ServerConfig, String> {
        let replicas = self
            .replicas
            .iter()
            .map(|s| parse_replica(s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut c = match &self.config {
            Some(path) => ServerConfig::from_file(path).map_err(|e| e.to_string())?,
            None => {
                let id = self.id.ok_or("--id is required without --config")?;
                let dir = self
                    .data_dir
                    .clone()
                    .ok_or("--data-dir is required without --config")?;
                ServerConfig::new(id, Vec::new(), dir)
            }
        };
        if !replicas.is_empty() {
            c.replicas = replicas;
        }
        if let Some(id) = self.id {
            c.id = id;
        }
        if let Some(d) = &self.data_dir {
            c.data_dir = d.clone();
        }
        if let Some(m) = self.metrics_addr {
            c.metrics_addr = Some(m);
        }
        if let Some(w) = self.workers {
            c.workers = w;
        }
        if let Some(t) = self.tick_ms {
            c.tick_ms = t;
        }
        c.allow_fault_injection |= self.allow_fault_injection;
        c.rebuild_despite_data_loss |= self.rebuild_despite_data_loss;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }
}

/// Run `main` on a multi-threaded runtime. The runtime is not waited on
/// past a second at the end: after a failure, a blocking task may be stuck
/// on a failed disk, and the process must still exit.
fn run<F: Future<Output = Result<(), String>>>(main: F) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("creek-io")
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let result = runtime.block_on(main);
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// From now on, a panic on any thread of the process is reported here, once
/// (the first), after the default hook has printed it with its place. A
/// panic in a task of the transport or the client API is otherwise caught
/// by the runtime and leaves the rest of the process running without it.
fn watch_panics() -> watch::Receiver<Option<String>> {
    let (tx, rx) = watch::channel(None);
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let thread = std::thread::current();
        let why = format!("thread '{}' {info}", thread.name().unwrap_or("<unnamed>"));
        let why = why.replace('\n', " ");
        tx.send_if_modified(|first| {
            if first.is_some() {
                return false;
            }
            *first = Some(why);
            true
        });
    }));
    rx
}

/// Resolves with the first panic `watch_panics` reports.
async fn panicked(mut panics: watch::Receiver<Option<String>>) -> String {
    // The hook keeps the sender for the life of the process.
    if let Ok(why) = panics.wait_for(Option::is_some).await {
        if let Some(why) = why.clone() {
            return why;
        }
    }
    std::future::pending().await
}

/// Resolves with the first of `servers` to fail, and why.
async fn first_failure(servers: &[Server]) -> (ReplicaId, Fatal) {
    let mut waits: Vec<_> = servers
        .iter()
        .map(|s| Box::pin(async move { (s.id(), s.failed().await) }))
        .collect();
    std::future::poll_fn(|cx| {
        for w in &mut waits {
            if let Poll::Ready(failed) = w.as_mut().poll(cx) {
                return Poll::Ready(failed);
            }
        }
        Poll::Pending
    })
    .await
}

/// Stop `servers` after a failure, as far as they let us within
/// [`STOP_AFTER_FAILURE`].
async fn stop_after_failure(servers: Vec<Server>) {
    let stop = async {
        for s in servers {
            s.shutdown().await;
        }
    };
    if tokio::time::timeout(STOP_AFTER_FAILURE, stop)
        .await
        .is_err()
    {
        tracing::warn!("the replicas did not stop in {STOP_AFTER_FAILURE:?}; exiting anyway");
    }
}

/// Logs to stderr; `RUST_LOG` filters (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `creek serve`: run one replica until Ctrl-C or SIGTERM, or until it
/// fails (then `Err`, after an ERROR line naming the cause).
pub fn serve(args: &ServeArgs) -> Result<(), String> {
    init_logging();
    let config = args.config()?;
    let panics = watch_panics();
    run(async {
        let server = Server::start(config).await.map_err(|e| e.to_string())?;
        println!(
            "creek replica {} serving clients on {}",
            server.id(),
            server.client_addr()
        );
        serve_until_stopped(server, panics).await
    })
}

/// Serve until Ctrl-C or SIGTERM (then stop, `Ok` once everything is
/// durable), or until the replica fails or the process panics (then `Err`,
/// after an ERROR line naming the cause).
async fn serve_until_stopped(
    server: Server,
    panics: watch::Receiver<Option<String>>,
) -> Result<(), String> {
    let id = server.id();
    let failure = tokio::select! {
        () = stop_signal() => None,
        why = server.failed() => Some(why.to_string()),
        why = panicked(panics) => Some(why),
    };
    if let Some(why) = failure {
        tracing::error!(replica = %id, error = %why, "the replica failed; exiting");
        stop_after_failure(vec![server]).await;
        return Err(format!("replica {id} failed: {why}"));
    }
    tracing::info!("stopping");
    server.stop().await.map_err(|why| {
        tracing::error!(replica = %id, error = %why, "the replica failed while stopping");
        format!("replica {id} failed while stopping: {why}")
    })
}

/// A port `offset` above `base`.
fn port_at(base: u16, offset: u16) -> Result<SocketAddr, String> {
    let port = base
        .checked_add(offset)
        .ok_or_else(|| format!("port {base} + {offset} overflows"))?;
    Ok(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// `creek dev add-replica`: start a replica under the next free id on the
/// next ports, configured with the cluster's members and itself, ask the
/// cluster to add it, and serve until Ctrl-C.
fn dev_add_replica(args: &DevArgs) -> Result<(), String> {
    let panics = watch_panics();
    run(async {
        let addrs: Vec<String> = (0..args.replicas.max(1))
            .map(|i| port_at(args.client_port, i).map(|a| a.to_string()))
            .collect::<Result<_, _>>()?;
        let client = creek_client::Client::connect(addrs.clone())
            .await
            .map_err(|e| format!("no `creek dev` replica answered at {addrs:?}: {e}"))?;
        let members = client
            .members()
            .await
            .map_err(|e| format!("asking the cluster for its members: {e}"))?;
        let id = u16::try_from(members.max_id + 1)
            .map_err(|_| "no replica id left (65535 used)".to_owned())?;
        let mut replicas = Vec::new();
        for m in &members.members {
            let parse = |a: &str| {
                a.parse::<SocketAddr>()
                    .map_err(|e| format!("member {} has address {a:?}: {e}", m.replica))
            };
            replicas.push(ReplicaAddr {
                id: u16::try_from(m.replica).map_err(|_| "a member id beyond 65535".to_owned())?,
                peer_addr: parse(&m.peer_addr)?,
                client_addr: parse(&m.client_addr)?,
            });
        }
        let me = ReplicaAddr {
            id,
            peer_addr: port_at(args.peer_port, id - 1)?,
            client_addr: port_at(args.client_port, id - 1)?,
        };
        replicas.push(me.clone());
        let mut config = ServerConfig::new(id, replicas, args.data_dir.join(format!("r{id}")));
        config.workers = 1;
        config.allow_fault_injection = args.allow_fault_injection;
        if args.metrics_port != 0 {
            config.metrics_addr = Some(port_at(args.metrics_port, id - 1)?);
        }
        config.validate().map_err(|e| e.to_string())?;
        let file = args.data_dir.join(format!("r{id}.toml"));
        let toml = config.to_toml().map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&args.data_dir)
            .and_then(|()| std::fs::write(&file, toml))
            .map_err(|e| format!("writing {}: {e}", file.display()))?;
        let server = Server::start(config).await.map_err(|e| e.to_string())?;
        let added = client
            .add_replica(id, &me.peer_addr.to_string(), &me.client_addr.to_string())
            .await;
        if let Err(e) = added {
            server.shutdown().await;
            return Err(format!("the cluster did not add replica {id}: {e}"));
        }
        println!(
            "creek dev: replica {id} added (client {}); it joins as a learner and becomes a \
             voter once caught up (creek admin members). Ctrl-C stops it; restart it with \
             creek serve --config {}",
            server.client_addr(),
            file.display()
        );
        serve_until_stopped(server, panics).await
    })
}

/// `creek dev`.
#[derive(clap::Args)]
pub struct DevArgs {
    /// Replicas in the cluster.
    #[arg(long, default_value_t = 3)]
    replicas: u16,
    /// Where each replica keeps its data (one subdirectory per replica); the
    /// cluster recovers from it on the next start.
    #[arg(long, default_value = "creek-data")]
    data_dir: PathBuf,
    /// Client port of replica 1; replica i listens on this + i - 1.
    #[arg(long, default_value_t = 7001)]
    client_port: u16,
    /// Peer port of replica 1; replica i listens on this + i - 1.
    #[arg(long, default_value_t = 7101)]
    peer_port: u16,
    /// Metrics port of replica 1 (0: no metrics endpoint).
    #[arg(long, default_value_t = 9101)]
    metrics_port: u16,
    /// Accept Admin.SetFaults.
    #[arg(long)]
    allow_fault_injection: bool,
    #[command(subcommand)]
    action: Option<DevAction>,
}

/// What `creek dev` does besides running the cluster.
#[derive(clap::Subcommand)]
pub enum DevAction {
    /// Add a replica to the running `creek dev` cluster (with the same
    /// flags): it runs in this process under the next free id, on the next
    /// ports, joins the cluster, and serves until Ctrl-C. Its configuration
    /// is written to DATA_DIR/rN.toml (`creek serve --config` restarts it).
    AddReplica,
}

/// `creek dev`: a local cluster on loopback in this process, until Ctrl-C.
pub fn dev(args: &DevArgs) -> Result<(), String> {
    init_logging();
    if let Some(DevAction::AddReplica) = args.action {
        return dev_add_replica(args);
    }
    let mut configs = ServerConfig::local_group(
        args.replicas,
        args.client_port,
        args.peer_port,
        &args.data_dir,
    )
    .map_err(|e| e.to_string())?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (i, c) in configs.iter_mut().enumerate() {
        c.workers = (cores / usize::from(args.replicas.max(1))).max(1);
        c.allow_fault_injection = args.allow_fault_injection;
        if args.metrics_port != 0 {
            let port = args
                .metrics_port
                .checked_add(i as u16)
                .ok_or("metrics port overflows")?;
            c.metrics_addr = Some(SocketAddr::from(([127, 0, 0, 1], port)));
        }
    }
    let panics = watch_panics();
    run(async {
        let mut servers = Vec::new();
        for c in configs {
            match Server::start(c).await {
                Ok(s) => servers.push(s),
                Err(e) => {
                    for s in servers {
                        s.shutdown().await;
                    }
                    return Err(e.to_string());
                }
            }
        }
        println!(
            "creek dev: {} replicas, data in {}",
            servers.len(),
            args.data_dir.display()
        );
        for s in &servers {
            let metrics = s
                .metrics_addr()
                .map(|a| format!("   metrics http://{a}/metrics"))
                .unwrap_or_default();
            println!("  replica {}  client {}{metrics}", s.id(), s.client_addr());
        }
        println!("try: creek call kv.put greeting hello   (Ctrl-C stops the cluster)");
        let failure = tokio::select! {
            () = stop_signal() => None,
            (id, why) = first_failure(&servers) => Some(format!("replica {id} failed: {why}")),
            why = panicked(panics) => Some(why),
        };
        if let Some(why) = failure {
            tracing::error!(error = %why, "a replica failed; stopping the cluster and exiting");
            stop_after_failure(servers).await;
            return Err(why);
        }
        println!("stopping…");
        let mut failed = Vec::new();
        for s in servers {
            let id = s.id();
            if let Err(why) = s.stop().await {
                tracing::error!(replica = %id, error = %why, "the replica failed while stopping");
                failed.push(format!("replica {id} failed while stopping: {why}"));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    })
}
