//! Starting and stopping one replica: open the data directory, recover the
//! node, bind the sockets, start the transport, the node loop, the ticker,
//! the gRPC server and the HTTP endpoint (metrics and console; over TLS
//! with `[tls]`, `crate::http_port`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use creek_core::ReplicaId;
use creek_node::{Node, NodeConfig};
use creek_procs::Registry;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::call::check::FrontDoor;
use crate::config::ServerConfig;
use crate::faults::Faults;
use crate::metrics::Metrics;
use crate::node_loop::{Durability, Event, Fatal, LoopConfig, NodeLoop};
use crate::service::{AdminService, CreekService};
use crate::tls::{Tls, TlsError};
use crate::transport::Transport;

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The data directory.
    #[error("data directory {dir}: {source}")]
    Store {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        source: creek_store::StoreError,
    },
    /// Recovering the node from its data.
    #[error("recovering the replica: {0}")]
    Node(#[from] creek_node::NodeError),
    /// A socket could not be bound.
    #[error("binding {what} address {addr}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS files.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// A thread could not be started.
    #[error("starting the node loop: {0}")]
    Thread(std::io::Error),
}

/// A running replica.
///
/// A replica that fails — its node loop panics, a write to its data
/// directory fails, consensus stops on lost data, its client API stops —
/// does not go on as a shell refusing every request: [`Server::failed`]
/// resolves with the cause, and the process should log it and exit
/// non-zero (`creek serve` does) so that a supervisor restarts it or
/// alerts.
pub struct Server {
    id: ReplicaId,
    client_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    events: mpsc::Sender<Event>,
    shutdown: watch::Sender<bool>,
    stopping: Arc<AtomicBool>,
    fatal: FatalCell,
    tls: Option<Arc<Tls>>,
    node_thread: Option<std::thread::JoinHandle<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The first fatal failure of a replica, for whoever waits on it.
pub(crate) type FatalCell = Arc<watch::Sender<Option<Fatal>>>;

/// Record `why` as the replica's failure, unless one is recorded already
/// (the first cause is the one to report).
pub(crate) fn publish(fatal: &FatalCell, why: Fatal) {
    fatal.send_if_modified(|f| {
        if f.is_some() {
            return false;
        }
        *f = Some(why);
        true
    });
}

/// Run the node loop on this thread until it ends; an end that was not a
/// requested stop — a failure it reports or a panic — is logged and
/// published.
fn run_node_loop(
    me: ReplicaId,
    node_loop: NodeLoop,
    events: mpsc::Receiver<Event>,
    fatal: &FatalCell,
) {
    // The loop owns all the state a panic could leave half-updated, and
    // that state is dropped with it: nothing observes it afterwards.
    let ended =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || node_loop.run(events)));
    let why = match ended {
        Ok(Ok(())) => return,
        Ok(Err(why)) => why,
        Err(panic) => Fatal::Panic(panic_message(panic.as_ref())),
    };
    tracing::error!(replica = %me, error = %why, "the replica failed and stops");
    publish(fatal, why);
}

/// The message a panic was raised with.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

impl Server {
    /// Start a replica with the built-in procedures and the benchmark
    /// workloads' (`tpcc.*`, `ycsb.load`), and on a directory replica the
    /// `directory.*` ones. Must be called inside a tokio
    /// runtime.
    pub async fn start(config: ServerConfig) -> Result<Server, StartError> {
        let mut registry = Registry::with_builtins();
        creek_workloads::register_all(&mut registry);
        if config.directory {
            creek_procs::builtins::directory::register(&mut registry);
        }
        Self::start_with(config, Arc::new(registry)).await
    }

    /// Start a replica with the given procedures (every replica of the
    /// group must hold the same).
    pub async fn start_with(
        config: ServerConfig,
        registry: Arc<Registry>,
    ) -> Result<Server, StartError> {
        config.validate()?;
        let me = config.replica_id();
        let (events_tx, events_rx) = mpsc::channel::<Event>(16 * 1024);
        // Durability reports reach the node loop without ever blocking the
        // persister thread.
        let durability = Arc::new(Durability::default());
        let opened = open_data_dir(&config, durability.callback(events_tx.clone()))?;
        let shards = crate::shards::ShardGate::load(&config, registry.clone())?;
        let node_config = node_config(&config, shards.as_deref());
        let limits = node_config.wire;
        let stable_every_us = node_config.stable.every_us;
        let procedures = Arc::new(crate::call::answer::procedures_reply(&registry));
        let (node, persister, recovered_ops) = recover(&config, node_config, registry, opened)?;
        let tls = load_tls(&config)?;
        let listeners = Listeners::bind(&config).await?;
        let client_addr = listeners.client_addr;
        let metrics_addr = listeners.metrics_addr;

        let faults = Arc::new(Faults::default());
        let transport = start_transport(
            &config,
            listeners.peer,
            events_tx.clone(),
            faults.clone(),
            limits.frame_bytes_max,
            tls.clone(),
        );
        durability.set_transport(transport.clone());
        let metrics = Arc::new(Metrics::new());
        // Every replica follows the cluster's switch (`auth.enable`), so
        // it checks users once its group does, whatever its `[auth]` says.
        let auth = match config.auth.root_hash() {
            _ if !config.auth.enabled => Some(Arc::new(crate::auth::Auth::off())),
            Ok(root) => Some(Arc::new(crate::auth::Auth::new(root))),
            Err(e) => return Err(StartError::Config(crate::ConfigError::Invalid(e))),
        };
        let corked = Arc::new(crate::native::out::Corked::default());
        let mpo = shards
            .as_ref()
            .map(|g| crate::mpo::Link::new(g.clone(), config.tls.clone(), me, events_tx.clone()));
        let front_mpo = mpo.clone();
        // A shard replica drives the moves of keys to its shard while it
        // leads it (`crate::mover`).
        let moves = match (&mpo, &shards, config.directory) {
            (Some(link), Some(gate), false) => {
                let mut planted = creek_types::planted::PlantedBugs::NONE;
                if let Some(bug) = config.planted_bug() {
                    let _ = planted.plant(bug);
                }
                Some(crate::mover::start(
                    link.clone(),
                    gate.clone(),
                    events_tx.clone(),
                    planted,
                ))
            }
            _ => None,
        };
        let node_loop = NodeLoop::new(
            node,
            persister,
            durability,
            transport.clone(),
            metrics.clone(),
            LoopConfig {
                recovered_ops,
                ..loop_config(
                    &config,
                    auth.clone(),
                    limits,
                    corked.clone(),
                    shards.clone(),
                    mpo,
                    stable_every_us,
                )
            },
        );
        if let Some(why) = node_loop.auth_refusal() {
            return Err(StartError::Config(crate::ConfigError::Invalid(format!(
                "refusing to start: {why} (docs/security.md, \"One switch per cluster\")"
            ))));
        }
        let fatal: FatalCell = Arc::new(watch::channel(None).0);
        let node_fatal = fatal.clone();
        let node_thread = std::thread::Builder::new()
            .name(format!("creek-node-{}", me.0))
            .spawn(move || run_node_loop(me, node_loop, events_rx, &node_fatal))
            .map_err(StartError::Thread)?;

        let (shutdown, shutdown_rx) = watch::channel(false);
        let stopping = Arc::new(AtomicBool::new(false));
        let mut tasks = vec![spawn_ticker(events_tx.clone(), config.tick())];
        if let Some(gate) = shards
            .as_ref()
            .filter(|g| g.role() != crate::shards::Role::Directory)
        {
            tasks.push(tokio::spawn(crate::shards::follow_directory(
                gate.clone(),
                config.tls.clone(),
            )));
        }
        let status = crate::service::StatusCache::new(events_tx.clone());
        let front = FrontDoor {
            events: events_tx.clone(),
            status: status.clone(),
            metrics: metrics.clone(),
            transport,
            me,
            max_request_bytes: config.max_request_bytes,
            stopping: stopping.clone(),
            auth: auth.clone(),
            shards,
            mpo: front_mpo,
            moves,
        };
        let admin = AdminService {
            events: events_tx.clone(),
            faults,
            allowed: config.allow_fault_injection,
            me,
            auth: auth.clone(),
            status,
        };
        let service = CreekService {
            front: front.clone(),
            procedures,
            tls: config.tls.is_some(),
        };
        // The console's invoke bodies are JSON: room for the request's
        // limit with the JSON's overhead.
        let console_body_bytes_max = crate::limits::decode_limit(config.max_request_bytes) * 2;
        if let Some(listener) = listeners.metrics {
            let console =
                crate::console::Console::new(service.clone(), console_body_bytes_max, tls.clone());
            let guard = crate::http_guard::HttpGuard::new(&config, auth.clone());
            let health = crate::health::router(front.events.clone(), config.health.clone());
            serve_console(
                (listener, tls.clone()),
                metrics,
                (console, health),
                guard,
                &shutdown_rx,
                &mut tasks,
            );
        }
        let clients = crate::client_port::Clients {
            listener: listeners.client,
            service,
            admin,
            front,
            corked,
            tls: tls.clone(),
            shutdown: shutdown_rx,
            fatal: fatal.clone(),
            stopping: stopping.clone(),
        };
        tasks.push(clients.serve(&config));
        tracing::info!(
            replica = %me,
            %client_addr,
            peer_addr = %config.me().peer_addr,
            tls = tls.is_some(),
            auth = config.auth.enabled,
            "replica serving"
        );
        Ok(Server {
            id: me,
            client_addr,
            metrics_addr,
            events: events_tx,
            shutdown,
            stopping,
            fatal,
            tls,
            node_thread: Some(node_thread),
            tasks,
        })
    }

    /// This replica.
    pub fn id(&self) -> ReplicaId {
        self.id
    }

    /// Where clients connect.
    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    /// Read the TLS files again (certificate rotation): connections made
    /// from now on, client and peer, use the new certificates; open ones
    /// keep theirs. `Ok(false)` without TLS; on an error nothing changes.
    pub fn reload_tls(&self) -> Result<bool, TlsError> {
        match &self.tls {
            Some(tls) => tls.reload().map(|()| true),
            None => Ok(false),
        }
    }

    /// Where metrics are served, if anywhere.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Whether the replica serves over TLS (its client, peer and HTTP
    /// ports).
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Resolves when the replica fails, with the cause (never, while it
    /// does not). The replica then serves nothing: the process should log
    /// the cause, [`stop`](Server::stop) and exit non-zero.
    pub async fn failed(&self) -> Fatal {
        let mut rx = self.fatal.subscribe();
        // `self` holds the sender, so the channel cannot close under us.
        if let Ok(f) = rx.wait_for(Option::is_some).await {
            if let Some(why) = f.clone() {
                return why;
            }
        }
        std::future::pending().await
    }

    /// The failure that stopped the replica, if it failed.
    pub fn failure(&self) -> Option<Fatal> {
        self.fatal.borrow().clone()
    }

    /// Stop cleanly: refuse new ops, stop the client API, make everything
    /// durable and join the node loop.
    pub async fn shutdown(self) {
        let _ = self.stop().await;
    }

    /// [`shutdown`](Server::shutdown), saying whether the replica failed,
    /// before the stop or during it (a write the final flush could not
    /// make durable).
    pub async fn stop(mut self) -> Result<(), Fatal> {
        self.stopping.store(true, Ordering::Relaxed);
        let _ = self.events.send(Event::Shutdown).await;
        if let Some(t) = self.node_thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        let _ = self.shutdown.send(true);
        for t in self.tasks.drain(..) {
            t.abort();
        }
        match self.failure() {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }
}

/// Open the data directory (the persister reports to `on_durable`).
fn open_data_dir(
    config: &ServerConfig,
    on_durable: creek_store::OnDurable,
) -> Result<creek_store::Opened, StartError> {
    let voters: Vec<u64> = config
        .group()
        .iter()
        .map(|r| creek_cab::raft_id(*r))
        .collect();
    creek_store::open(&config.data_dir, voters, on_durable).map_err(|source| StartError::Store {
        dir: config.data_dir.clone(),
        source,
    })
}

/// The node's configuration from the server's (and the shard map it
/// starts with, if any), with a warning for each setting that gives up a
/// guarantee on purpose.
fn node_config(config: &ServerConfig, shards: Option<&crate::shards::ShardGate>) -> NodeConfig {
    let me = config.replica_id();
    let mut node_config = NodeConfig::for_group(me, &config.group());
    node_config.tick_us = config.tick_ms * 1000;
    node_config.replica.stabilize_after_us = config.stabilize_after_ms * 1000;
    node_config.replica.early_tentative_views = config.early_preliminary_views;
    node_config.checkpoint_every_ticks =
        (config.checkpoint_every_secs * 1000 / config.tick_ms).max(1);
    node_config.checkpoint_rewrite_ratio = config.checkpoint_rewrite_ratio;
    node_config.rebuild_despite_data_loss = config.rebuild_despite_data_loss;
    node_config.replica.session_ttl_us = config.session_ttl_secs * 1_000_000;
    if let Some(n) = config.snapshot.revisions_kept {
        node_config.replica.revisions_kept = n;
    }
    node_config.pending_writes_max = config.pending_writes_max;
    node_config.strong_pending_max = config.strong_pending_max;
    node_config.weak_pending_max = config.weak_pending_max;
    node_config.cab.compaction_lag_max = config.compaction_lag_max;
    node_config.stable = crate::stable::config(config, shards);
    if let Some(bug) = config.planted_bug() {
        // `ServerConfig::validate` refused a bug this build cannot plant.
        let planted = node_config.planted.plant(bug);
        assert!(
            planted.is_ok(),
            "a validated plant_bug is refused: {planted:?}"
        );
    }
    if let Some(bug) = &config.plant_bug {
        tracing::warn!(replica = %me, bug, "a protocol bug is planted on purpose (tests only)");
    }
    if config.rebuild_despite_data_loss {
        tracing::warn!(
            replica = %me,
            "rebuild_despite_data_loss is on: if this replica lost its data while a \
             majority of the group did too, it is rebuilt from the replicas left, and \
             ops only the lost replicas acknowledged are gone for good; turn it off \
             once the cluster is whole"
        );
    }
    node_config
}

/// Recover the node from what the data directory holds; the persister
/// goes on writing for it.
fn recover(
    config: &ServerConfig,
    node_config: NodeConfig,
    registry: Arc<Registry>,
    opened: creek_store::Opened,
) -> Result<(Node<creek_store::LogStore>, creek_store::Persister, usize), StartError> {
    let me = config.replica_id();
    let recovered_ops = opened.recovered.ops.len();
    if opened.recovered.repaired {
        tracing::warn!(
            replica = %me,
            dir = %config.data_dir.display(),
            "the data directory was not closed cleanly (crash, kill or failed fsync): \
             its database was checked and rolled back to its last complete commit; \
             a write that was torn or not fully synced is dropped (no peer saw it)"
        );
    }
    let from_checkpoint = opened
        .recovered
        .checkpoint
        .as_ref()
        .map(|c| c.committed_len);
    let node = Node::recover(
        node_config,
        registry,
        opened.storage,
        opened.recovered.into(),
        fresh_nonce(),
    )?;
    tracing::info!(
        replica = %me,
        recovered_ops,
        checkpoint = ?from_checkpoint,
        "recovered from the data directory"
    );
    Ok((node, opened.persister, recovered_ops))
}

/// The TLS files, if configured; a warning when neither TLS nor loopback
/// protects the replica.
fn load_tls(config: &ServerConfig) -> Result<Option<Arc<Tls>>, StartError> {
    let me = config.replica_id();
    let tls = match &config.tls {
        Some(files) => Some(Arc::new(Tls::load(me, files.clone())?)),
        None => None,
    };
    if config.tls.is_none() && config.insecure {
        let me_addr = config.me();
        tracing::warn!(
            replica = %me,
            client_addr = %me_addr.client_addr,
            peer_addr = %me_addr.peer_addr,
            "INSECURE: no TLS, and --insecure allows listening beyond loopback: anyone who \
             can reach these addresses can read and change every value and speak the \
             replica protocol"
        );
    }
    Ok(tls)
}

/// The replica's bound sockets.
struct Listeners {
    peer: TcpListener,
    client: TcpListener,
    client_addr: SocketAddr,
    metrics: Option<TcpListener>,
    metrics_addr: Option<SocketAddr>,
}

impl Listeners {
    /// Bind the peer, client and (if configured) metrics addresses.
    async fn bind(config: &ServerConfig) -> Result<Listeners, StartError> {
        let me_addr = config.me().clone();
        let bind = |what, addr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Bind { what, addr, source })
        };
        let peer = bind("peer", me_addr.peer_addr).await?;
        let client = bind("client", me_addr.client_addr).await?;
        let client_addr = client.local_addr().map_err(|source| StartError::Bind {
            what: "client",
            addr: me_addr.client_addr,
            source,
        })?;
        let metrics = match config.metrics_addr {
            Some(a) => Some(bind("metrics", a).await?),
            None => None,
        };
        let metrics_addr = metrics.as_ref().and_then(|l| l.local_addr().ok());
        Ok(Listeners {
            peer,
            client,
            client_addr,
            metrics,
            metrics_addr,
        })
    }
}

/// Start the peer transport on `listener`.
fn start_transport(
    config: &ServerConfig,
    listener: TcpListener,
    events: mpsc::Sender<Event>,
    faults: Arc<Faults>,
    frame_bytes_max: usize,
    tls: Option<Arc<Tls>>,
) -> Arc<Transport> {
    let peers: Vec<(ReplicaId, SocketAddr)> = config
        .replicas
        .iter()
        .filter(|r| r.id != config.id)
        .map(|r| (ReplicaId(r.id), r.peer_addr))
        .collect();
    Arc::new(Transport::start(
        config.replica_id(),
        &peers,
        listener,
        events,
        faults,
        config.peer_queue_frames,
        crate::transport::InboundLimits {
            connections_max: config.peer_connections_max,
            read_timeout: std::time::Duration::from_millis(config.peer_read_timeout_ms),
            frame_bytes_max,
        },
        tls,
    ))
}

/// The node loop's configuration.
fn loop_config(
    config: &ServerConfig,
    auth: Option<Arc<crate::auth::Auth>>,
    limits: creek_wire::Limits,
    corked: Arc<crate::native::out::Corked>,
    shards: Option<Arc<crate::shards::ShardGate>>,
    mpo: Option<Arc<crate::mpo::Link>>,
    stable_every_us: u64,
) -> LoopConfig {
    LoopConfig {
        shards,
        mpo,
        stable_every_us,
        recovered_ops: 0,
        workers: config.worker_threads(),
        watch_history_bytes: config.watch_history_bytes,
        auth,
        limits,
        corked,
        addrs: config
            .replicas
            .iter()
            .map(|r| {
                let addrs = creek_core::Addrs {
                    peer: r.peer_addr.to_string(),
                    client: r.client_addr.to_string(),
                };
                (ReplicaId(r.id), addrs)
            })
            .collect(),
    }
}

/// The protocol clock. A full queue skips a tick rather than block.
fn spawn_ticker(
    events: mpsc::Sender<Event>,
    tick: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut iv = tokio::time::interval(tick);
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            iv.tick().await;
            if events.is_closed() {
                return;
            }
            let _ = events.try_send(Event::Tick);
        }
    })
}

/// Serve the metrics, the console and the health routes on `listener`
/// (over TLS with `tls`) until shutdown.
fn serve_console(
    (listener, tls): (TcpListener, Option<Arc<Tls>>),
    metrics: Arc<Metrics>,
    (console, health): (crate::console::Console, axum::Router),
    guard: crate::http_guard::HttpGuard,
    shutdown: &watch::Receiver<bool>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    let stop = shutdown.clone();
    let console = Arc::new(console);
    tasks.push(tokio::spawn(console.clone().run_sampler()));
    let routes = crate::console::router(console).merge(health);
    tasks.push(tokio::spawn(async move {
        if let Err(e) = crate::metrics::serve(listener, metrics, routes, guard, tls, stop).await {
            tracing::error!(error = %e, "the metrics and console endpoint stopped");
        }
    }));
}

/// A random nonce for a new data directory (see `creek_node::membership`):
/// the standard library's per-process random hash keys, over the clock and
/// the process id.
pub fn fresh_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}
