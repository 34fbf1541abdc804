//! `creek serve` (one replica) and `creek dev` (a local cluster in one
//! process).

use std::net::SocketAddr;
use std::path::PathBuf;

use creek_server::{ReplicaAddr, Server, ServerConfig};

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
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("creek-io")
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))
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

/// `creek serve`: run one replica until Ctrl-C or SIGTERM.
pub fn serve(args: &ServeArgs) -> Result<(), String> {
    init_logging();
    let config = args.config()?;
    runtime()?.block_on(async {
        let server = Server::start(config).await.map_err(|e| e.to_string())?;
        println!(
            "creek replica {} serving clients on {}",
            server.id(),
            server.client_addr()
        );
        stop_signal().await;
        tracing::info!("stopping");
        server.shutdown().await;
        Ok(())
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
}

/// `creek dev`: a local cluster on loopback in this process, until Ctrl-C.
pub fn dev(args: &DevArgs) -> Result<(), String> {
    init_logging();
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
    runtime()?.block_on(async {
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
        stop_signal().await;
        println!("stopping…");
        for s in servers {
            s.shutdown().await;
        }
        Ok(())
    })
}
