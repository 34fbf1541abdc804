//! `creek serve`: one replica.
//!
//! It runs until Ctrl-C or SIGTERM, or until a replica fails (its node
//! loop panics, a write fails, consensus finds lost data) or any thread of
//! the process panics: then the cause is logged as an ERROR and the process
//! exits non-zero, so that a supervisor restarts it or alerts. A process
//! that stayed up refusing every request would hide the failure.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use creek_server::{ReplicaAddr, Server, ServerConfig};
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
    /// Threads serving clients and peers (0: half the cores, at least one).
    #[arg(long)]
    io_threads: Option<usize>,
    /// Protocol tick in milliseconds.
    #[arg(long)]
    tick_ms: Option<u64>,
    /// Stable-time interval in milliseconds (`[snapshot] stable_every_ms`;
    /// 5 by default on a shard, off on a cluster of one group; 0: off):
    /// how often a replica reports how far it
    /// applied, a shard's leader publishes its shard's stable time, and an
    /// idle leader commits a clock no-op.
    #[arg(long, value_name = "MS")]
    stable_every_ms: Option<u64>,
    /// Accept Admin.SetFaults (tests and benchmarks only).
    #[arg(long)]
    allow_fault_injection: bool,
    /// After a majority lost their data directories: rebuild this lost
    /// replica from the replicas left anyway (ops only the lost replicas
    /// acknowledged are gone for good).
    #[arg(long)]
    rebuild_despite_data_loss: bool,
    /// TLS on client and peer links with the files `creek certs` wrote to
    /// DIR: DIR/ca.crt, DIR/node-ID.crt and DIR/node-ID.key (replaces the
    /// file's `[tls]` table).
    #[arg(long, value_name = "DIR")]
    certs_dir: Option<PathBuf>,
    /// Listen without TLS on addresses that are not loopback (refused
    /// otherwise). Anyone who can reach them can read and change every
    /// value and speak the replica protocol: a trusted network only.
    #[arg(long)]
    insecure: bool,
    /// Stop (as on SIGTERM) when the parent process exits: `creek dev`'s
    /// replicas do not outlive it.
    #[arg(long, hide = true)]
    stop_with_parent: bool,
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
        if let Some(t) = self.io_threads {
            c.io_threads = t;
        }
        if let Some(t) = self.tick_ms {
            c.tick_ms = t;
        }
        if let Some(ms) = self.stable_every_ms {
            c.snapshot.stable_every_ms = Some(ms);
        }
        c.allow_fault_injection |= self.allow_fault_injection;
        c.rebuild_despite_data_loss |= self.rebuild_despite_data_loss;
        if let Some(dir) = &self.certs_dir {
            c.tls = Some(creek_server::TlsConfig::in_dir(dir, c.id));
        }
        c.insecure |= self.insecure;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }
}

/// Run `main` on a multi-threaded runtime of `threads` threads. The runtime
/// is not waited on past a second at the end: after a failure, a blocking
/// task may be stuck on a failed disk, and the process must still exit.
fn run<F: Future<Output = Result<(), String>>>(threads: usize, main: F) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(threads)
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

/// How a server logs: `--log-level`, `--log-format`.
#[derive(clap::Args, Debug, Clone)]
pub struct LogArgs {
    /// Log level of `serve` and `dev`: error, warn, info, debug or trace,
    /// or a filter like `info,creek_node=debug` (default: RUST_LOG, else
    /// info).
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log lines as text (coloured only on a terminal) or as JSON objects.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One line per event.
    Text,
    /// One JSON object per event.
    Json,
}

/// Logs to stderr at `--log-level`, else `RUST_LOG`, else `info`; colour
/// only when stderr is a terminal.
pub fn init_logging(log: &LogArgs) -> Result<(), String> {
    use std::io::IsTerminal;
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let filter = match &log.log_level {
        // A bare word would be taken as a target's name: only levels are.
        Some(level)
            if !level.contains(['=', ',']) && !LEVELS.contains(&level.to_lowercase().as_str()) =>
        {
            return Err(format!(
                "--log-level {level:?}: use error, warn, info, debug or trace, or a filter such \
                 as info,creek_node=debug"
            ));
        }
        Some(level) => tracing_subscriber::EnvFilter::try_new(level)
            .map_err(|e| format!("--log-level {level:?}: {e}"))?,
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match log.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn stop_signal() {
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
pub fn serve(args: &ServeArgs, log: &LogArgs) -> Result<(), String> {
    init_logging(log)?;
    let config = args.config()?;
    let with_parent = args.stop_with_parent;
    run_server(config.io_threads(), |panics| async move {
        let server = Server::start(config).await.map_err(|e| e.to_string())?;
        println!(
            "creek replica {} serving clients on {}",
            server.id(),
            server.client_addr()
        );
        if let Some(a) = server.metrics_addr() {
            // With TLS the HTTP port is HTTPS too.
            let scheme = if server.tls() { "https" } else { "http" };
            println!("  console {scheme}://{a}/   metrics {scheme}://{a}/metrics");
        }
        serve_until_stopped(server, panics, with_parent).await
    })
}

/// Run `main` on a server runtime of `threads` threads, with panics on any
/// thread reported to it (see [`watch_panics`]).
pub(crate) fn run_server<F, Fut>(threads: usize, main: F) -> Result<(), String>
where
    F: FnOnce(watch::Receiver<Option<String>>) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let panics = watch_panics();
    run(threads, main(panics))
}

/// Resolves once this process's parent has exited (it was adopted by
/// another process).
async fn parent_gone() {
    let parent = std::os::unix::process::parent_id();
    let mut every = tokio::time::interval(Duration::from_millis(500));
    loop {
        every.tick().await;
        if std::os::unix::process::parent_id() != parent {
            return;
        }
    }
}

/// Reload the TLS files on every SIGHUP (certificate rotation); never
/// resolves.
async fn reload_on_hangup(server: &Server) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: certificates are not reloaded");
        return std::future::pending().await;
    };
    while hangups.recv().await.is_some() {
        match server.reload_tls() {
            Ok(true) => tracing::info!(
                replica = %server.id(),
                "SIGHUP: reloaded the TLS certificates; new connections use them"
            ),
            Ok(false) => tracing::info!("SIGHUP: no TLS configured, nothing to reload"),
            Err(e) => tracing::error!(
                replica = %server.id(),
                error = %e,
                "SIGHUP: the TLS certificates could not be reloaded; the old ones stay in use"
            ),
        }
    }
    std::future::pending().await
}

/// Serve until Ctrl-C or SIGTERM (then stop, `Ok` once everything is
/// durable), or until the replica fails or the process panics (then `Err`,
/// after an ERROR line naming the cause).
pub(crate) async fn serve_until_stopped(
    server: Server,
    panics: watch::Receiver<Option<String>>,
    with_parent: bool,
) -> Result<(), String> {
    let id = server.id();
    let orphaned = async {
        if with_parent {
            parent_gone().await;
            tracing::warn!("the parent process exited; stopping");
        } else {
            std::future::pending::<()>().await;
        }
    };
    let failure = tokio::select! {
        () = reload_on_hangup(&server) => None,
        () = stop_signal() => None,
        () = orphaned => None,
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
