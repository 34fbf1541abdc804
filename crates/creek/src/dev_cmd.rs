//! `creek dev`: a local cluster on loopback, each replica its own
//! `creek serve` process, with a prompt to stop, start and kill replicas
//! (to watch a failover in one window). `creek dev add-replica` adds one
//! more replica to a running `creek dev` cluster.

use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use creek_client::Levels;
use creek_harness::launcher::{Cluster, Launch, OnDrop, Signal};
use creek_harness::ports;
use creek_server::{ReplicaAddr, Server, ServerConfig};
use creek_types::value::Value;

use crate::serve_cmd::{self, LogArgs, LogFormat};

/// Most replicas `creek dev` runs (per shard).
const REPLICAS_MAX: u16 = 9;
/// Replicas of a sharded dev cluster's directory group.
const DIRECTORY_REPLICAS: u16 = 3;

/// Most shards `creek dev` runs.
const SHARDS_MAX: u16 = 8;
/// How long a started replica may take to open its client port.
const START_WAIT: Duration = Duration::from_secs(20);
/// How long `stop` waits for a replica to stop before it kills it.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// `creek dev`.
#[derive(clap::Args)]
pub struct DevArgs {
    /// Replicas in the cluster (1 to 9); with `--shards`, in each shard.
    #[arg(long, default_value_t = 3)]
    replicas: u16,
    /// Shards (1 to 8), each a group of `--replicas` replicas owning its
    /// share of the keys (hashed), and with more than one a directory group
    /// of three holding the map; replica ids and ports count up across
    /// shards, then the directory's, and the map the cluster was formed
    /// with is kept in DATA_DIR/shard-map.bin.
    #[arg(long, default_value_t = 1)]
    shards: u16,
    /// Where each replica keeps its data (`rN/`), its configuration
    /// (`rN.toml`) and its log (`rN.log`); the cluster recovers from it on
    /// the next start.
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
    /// TLS on every link and users checked: certificates for the replicas
    /// and a client `root`, and a root token, are made in DATA_DIR/certs
    /// (kept for the next start), and the way to connect is printed.
    #[arg(long)]
    secure: bool,
    #[command(subcommand)]
    action: Option<DevAction>,
}

/// What `creek dev` does besides running the cluster.
#[derive(clap::Subcommand)]
pub enum DevAction {
    /// Add a replica to the running `creek dev` cluster (with the same
    /// flags): it runs in this process under the next free id, on the next
    /// ports, joins the cluster, and serves until Ctrl-C. Its configuration
    /// is written to DATA_DIR/rN.toml (`creek serve --config` restarts it,
    /// and so does the next `creek dev`).
    AddReplica,
    /// Add a shard to the running sharded `creek dev` cluster (with the
    /// same flags, `--shards` included): its replicas (as many as each
    /// shard has) run in this process under the next free ids, on the
    /// next ports, listed in the directory's map owning no key yet, and
    /// serve until Ctrl-C. Give it keys with `creek shards rebalance`.
    /// Their configurations are written to DATA_DIR/rN.toml (`creek serve
    /// --config` restarts them).
    AddShard,
}

const HELP: &str = "\
commands:
  stop N    stop replica N gracefully (SIGTERM)
  kill N    kill replica N at once (SIGKILL: a crash)
  start N   start replica N again from its data directory
  ps        which replicas run, their process ids, addresses and logs
  help      this text
  quit      stop every replica and exit (as Ctrl-C does)";

/// `creek dev`: start the replicas, then take commands until Ctrl-C,
/// SIGTERM, `quit` or the end of the input.
pub fn dev(args: &DevArgs, log: &LogArgs) -> Result<(), String> {
    serve_cmd::init_logging(log)?;
    if let Some(DevAction::AddReplica) = args.action {
        if args.shards > 1 {
            return Err("add-replica grows a dev cluster of one group; a sharded one is                         formed with its replicas"
                .into());
        }
        return add_replica(args);
    }
    if let Some(DevAction::AddShard) = args.action {
        if args.shards < 2 {
            return Err(
                "add-shard grows a sharded dev cluster (started with --shards 2 or more)".into(),
            );
        }
        return add_shard(args);
    }
    if !(1..=SHARDS_MAX).contains(&args.shards) {
        return Err(format!(
            "--shards {}: a dev cluster has 1 to {SHARDS_MAX} shards",
            args.shards
        ));
    }
    if !(1..=REPLICAS_MAX).contains(&args.replicas) {
        return Err(format!(
            "--replicas {}: a dev cluster has 1 to {REPLICAS_MAX} replicas (3 by default)",
            args.replicas
        ));
    }
    let mut cluster = DevCluster::configure(args, log)?;
    cluster.check_ports()?;
    for i in 0..cluster.procs.len() {
        cluster.start(i)?;
    }
    cluster.wait_started()?;
    cluster.banner();
    let result = cluster.serve();
    let stopped = cluster.stop_all();
    result.and(stopped)
}

struct DevCluster {
    /// The replicas' processes, configurations and logs in the data
    /// directory (replica `i + 1` at index `i`).
    procs: Cluster,
    /// Each replica's metrics endpoint, if it serves one.
    metrics: Vec<Option<SocketAddr>>,
    /// The certificate directory with `--secure`.
    certs: Option<PathBuf>,
    /// Shards, and replicas in each.
    shards: u16,
    replicas: u16,
}

/// What the prompt thread hands the main loop.
enum Input {
    Line(String),
    End,
}

impl DevCluster {
    /// Write each replica's configuration under the data directory, and
    /// take in replicas added earlier (`rN.toml` with N past `--replicas`).
    fn configure(args: &DevArgs, log: &LogArgs) -> Result<DevCluster, String> {
        let mut configs = if args.shards > 1 {
            local_shards(args)?
        } else {
            ServerConfig::local_group(
                args.replicas,
                args.client_port,
                args.peer_port,
                &args.data_dir,
            )
            .map_err(|e| e.to_string())?
        };
        let total = configs.len() as u16;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut log_flags = vec![
            "--log-format".into(),
            match log.log_format {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            }
            .into(),
        ];
        if let Some(level) = &log.log_level {
            log_flags.extend(["--log-level".into(), level.into()]);
        }
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let launch = Launch {
            args_before: log_flags,
            // The replica stops if `creek dev` goes away.
            args_after: vec!["--stop-with-parent".into()],
            stdin_null: true,
            // Ctrl-C at the terminal reaches `creek dev`, which stops the
            // replicas in turn.
            own_process_group: true,
            on_drop: OnDrop::KeepDir,
            ..Launch::new(exe, args.data_dir.clone())
        };
        let mut procs = Cluster::on(launch, Vec::new(), Vec::new())?;
        let certs = if args.secure {
            Some(make_certs(&args.data_dir.join("certs"), total)?)
        } else {
            None
        };
        let root = match &certs {
            Some(dir) => Some(root_token(dir)?),
            None => None,
        };
        let mut metrics = Vec::new();
        for (i, c) in configs.iter_mut().enumerate() {
            if let Some(dir) = &certs {
                c.tls = Some(creek_server::TlsConfig::in_dir(dir, c.id));
            }
            if let Some(root) = &root {
                c.auth = creek_server::AuthConfig {
                    enabled: true,
                    root_token_sha256: Some(creek_server::auth::to_hex(&root.hash())),
                };
            }
            c.workers = (cores / usize::from(total)).max(1);
            c.allow_fault_injection = args.allow_fault_injection;
            if args.metrics_port != 0 {
                c.metrics_addr = Some(port_at(args.metrics_port, i as u16)?);
            }
            c.validate().map_err(|e| e.to_string())?;
            let i = procs.push(c.me().client_addr, c.me().peer_addr);
            procs.write_config(i, c)?;
            metrics.push(c.metrics_addr);
        }
        loop {
            let path = procs.config_path(procs.len());
            if !path.exists() {
                break;
            }
            let c = ServerConfig::from_file(&path).map_err(|e| e.to_string())?;
            procs.push(c.me().client_addr, c.me().peer_addr);
            metrics.push(c.metrics_addr);
        }
        Ok(DevCluster {
            procs,
            metrics,
            certs,
            shards: args.shards,
            replicas: args.replicas,
        })
    }

    /// Every port the replicas will listen on is free (another cluster on
    /// them would answer in their place).
    fn check_ports(&self) -> Result<(), String> {
        let mut named = Vec::new();
        for (i, metrics) in self.metrics.iter().enumerate() {
            let ports = [
                ("client", Some(self.procs.clients[i])),
                ("peer", Some(self.procs.peers[i])),
                ("metrics", *metrics),
            ];
            named.extend(
                ports
                    .into_iter()
                    .filter_map(|(what, addr)| Some((i + 1, what, addr?))),
            );
        }
        let addrs: Vec<SocketAddr> = named.iter().map(|(_, _, a)| *a).collect();
        ports::check_free(&addrs).map_err(|(k, e)| {
            let (id, what, addr) = named[k];
            format!(
                "{addr}, replica {id}'s {what} port, is taken ({e}): is another `creek \
                 dev` running? Stop it, or pick other ports with --client-port, \
                 --peer-port and --metrics-port"
            )
        })
    }

    /// The index of replica `id`, as a command names it.
    fn index(&self, word: Option<&str>) -> Result<usize, String> {
        let ids: Vec<String> = (1..=self.procs.len()).map(|id| id.to_string()).collect();
        let bad = || format!("name a replica: one of {}", ids.join(", "));
        let id: usize = word.ok_or_else(bad)?.parse().map_err(|_| bad())?;
        if (1..=self.procs.len()).contains(&id) {
            Ok(id - 1)
        } else {
            Err(bad())
        }
    }

    /// Start replica `i` as a `creek serve` process, in a process group of
    /// its own that stops if `creek dev` goes away.
    fn start(&mut self, i: usize) -> Result<(), String> {
        self.procs.spawn(i)
    }

    /// Wait until every started replica accepts clients; a replica that
    /// exits instead fails the start, with the end of its log.
    fn wait_started(&mut self) -> Result<(), String> {
        self.procs.wait_accepting(START_WAIT)
    }

    fn banner(&self) {
        let log = self.procs.log_path(0);
        let dir = log
            .parent()
            .map_or_else(String::new, |d| d.display().to_string());
        if self.shards > 1 {
            println!(
                "creek dev: {} shards of {} replicas and a directory of {DIRECTORY_REPLICAS}, each \
                 replica its own process; data, logs and the shard map in {dir}",
                self.shards, self.replicas
            );
        } else {
            println!(
                "creek dev: {} replicas, each its own process; data and logs in {dir}",
                self.procs.len()
            );
        }
        // With TLS the HTTP port is HTTPS, with the replicas' certificates.
        let scheme = if self.certs.is_some() {
            "https"
        } else {
            "http"
        };
        for (i, metrics) in self.metrics.iter().enumerate() {
            let metrics = metrics
                .map(|a| format!("   console {scheme}://{a}/   metrics {scheme}://{a}/metrics"))
                .unwrap_or_default();
            let in_shards = usize::from(self.shards * self.replicas);
            let shard = if self.shards > 1 && i >= in_shards {
                "  directory".to_owned()
            } else if self.shards > 1 {
                format!("  shard {}", i / usize::from(self.replicas))
            } else {
                String::new()
            };
            println!(
                "  replica {}{shard}  client {}{metrics}",
                i + 1,
                self.procs.clients[i]
            );
        }
        if let Some(a) = self.metrics.first().copied().flatten() {
            println!(
                "open {scheme}://{a}/ for the live console (every replica serves one; it shows a \
                 stopped or killed replica as down)"
            );
            if let Some(dir) = &self.certs {
                println!(
                    "  (a browser that does not trust {}/ca.crt warns first; the page asks for \
                     the root token)",
                    dir.display()
                );
            }
        }
        let endpoints = self.endpoints_export();
        if let Some(dir) = &self.certs {
            let d = dir.display();
            println!(
                "TLS on every link (certificates in {d}); clients need the CA and a client \
                 certificate, and every call a token (the root token, admin on everything, \
                 is in {d}/root.token):\n  export CREEK_CA={d}/ca.crt CREEK_CERT={d}/client-root.crt \
                 CREEK_KEY={d}/client-root.key CREEK_TOKEN=$(cat {d}/root.token){}\nthen make users \
                 with their own tokens: creek user add alice --role readwrite",
                endpoints.as_deref().map(|e| format!(" {e}")).unwrap_or_default()
            );
        } else if let Some(e) = &endpoints {
            // Not the ports `creek call` tries by default.
            println!("clients find this cluster with:\n  export {e}");
        }
        println!(
            "try: creek call kv.put greeting hello     creek status\n\
             type `stop 2` / `start 2` / `kill 1` to watch a failover, `help` for more; \
             Ctrl-C stops the cluster"
        );
    }
    /// `CREEK_ENDPOINTS=…` naming this cluster's client addresses, unless
    /// they are the ones the client commands try by default.
    fn endpoints_export(&self) -> Option<String> {
        let addrs: Vec<String> = self.procs.clients.iter().map(|a| a.to_string()).collect();
        let default = addrs.len() == crate::cli::DEV_ADDRS.len()
            && addrs.iter().zip(crate::cli::DEV_ADDRS).all(|(a, d)| a == d);
        (!default).then(|| format!("CREEK_ENDPOINTS={}", addrs.join(",")))
    }

    /// Take commands until `quit`, Ctrl-C or SIGTERM; report replicas that
    /// exit by themselves. The end of the input (no terminal) leaves the
    /// cluster running until a signal.
    fn serve(&mut self) -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("starting the runtime: {e}"))?;
        let interactive = std::io::stdin().is_terminal();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("creek-dev-prompt".into())
            .spawn(move || {
                for line in std::io::stdin().lock().lines() {
                    let Ok(line) = line else { break };
                    if tx.send(Input::Line(line)).is_err() {
                        break;
                    }
                }
                let _ = tx.send(Input::End);
            })
            .map_err(|e| format!("starting the prompt: {e}"))?;
        runtime.block_on(async {
            let mut input_open = true;
            let mut check = tokio::time::interval(Duration::from_millis(250));
            let stop = serve_cmd::stop_signal();
            tokio::pin!(stop);
            prompt(interactive);
            loop {
                tokio::select! {
                    () = &mut stop => return Ok(()),
                    _ = check.tick() => self.report_exits(),
                    input = rx.recv(), if input_open => match input {
                        Some(Input::Line(line)) => {
                            if !self.command(&line) {
                                return Ok(());
                            }
                            prompt(interactive);
                        }
                        Some(Input::End) | None => input_open = false,
                    },
                }
            }
        })
    }

    /// Run one prompt command; false on `quit`.
    fn command(&mut self, line: &str) -> bool {
        let mut words = line.split_whitespace();
        let result = match words.next() {
            None => Ok(()),
            Some("quit" | "exit") => return false,
            Some("help" | "?") => {
                println!("{HELP}");
                Ok(())
            }
            Some("ps") => {
                self.ps();
                Ok(())
            }
            Some(verb @ ("stop" | "kill" | "start")) => {
                self.index(words.next()).and_then(|i| match verb {
                    "stop" => self.stop(i),
                    "kill" => self.kill(i),
                    _ => self
                        .start(i)
                        .map(|()| println!("replica {} started", i + 1)),
                })
            }
            Some(other) => Err(format!("unknown command {other:?}\n{HELP}")),
        };
        if let Err(e) = result {
            println!("{e}");
        }
        true
    }

    fn ps(&mut self) {
        for i in 0..self.procs.len() {
            let state = match self.procs.pid(i) {
                Some(pid) => format!("running (pid {pid})"),
                None => "stopped".to_owned(),
            };
            println!(
                "  replica {}  {state:<22} client {}  log {}",
                i + 1,
                self.procs.clients[i],
                self.procs.log_path(i).display()
            );
        }
    }

    /// SIGTERM replica `i` and wait for it (SIGKILL after [`STOP_WAIT`]).
    fn stop(&mut self, i: usize) -> Result<(), String> {
        let Some(status) = self.procs.stop(i, STOP_WAIT)? else {
            return Err(format!("replica {} is not running", i + 1));
        };
        println!("replica {} stopped ({status})", i + 1);
        Ok(())
    }

    /// SIGKILL replica `i`: a crash, as far as the others can tell.
    fn kill(&mut self, i: usize) -> Result<(), String> {
        if !self.procs.kill(i)? {
            return Err(format!("replica {} is not running", i + 1));
        }
        println!("replica {} killed", i + 1);
        Ok(())
    }

    /// Say so when a replica exited by itself (it stays down until `start`).
    fn report_exits(&mut self) {
        for i in 0..self.procs.len() {
            if let Some(why) = self.procs.take_exited(i) {
                println!(
                    "\nreplica {} exited by itself: {why}; {}\n(`start {}` starts it again)",
                    i + 1,
                    self.procs.log_tail(i),
                    i + 1
                );
            }
        }
    }

    /// Stop every running replica; an error names those that did not stop
    /// cleanly.
    fn stop_all(&mut self) -> Result<(), String> {
        println!("stopping…");
        for i in 0..self.procs.len() {
            let _ = self.procs.signal(i, Signal::Term);
        }
        let mut failed = Vec::new();
        for i in 0..self.procs.len() {
            match self.procs.wait_exit(i, STOP_WAIT) {
                Ok(None) => {}
                Ok(Some(status)) if status.success() => {}
                Ok(Some(status)) => failed.push(format!(
                    "replica {} exited with {status} (log {})",
                    i + 1,
                    self.procs.log_path(i).display()
                )),
                Err(e) => failed.push(e),
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    }
}

fn prompt(interactive: bool) {
    if interactive {
        print!("creek dev> ");
        let _ = std::io::stdout().flush();
    }
}

/// A loopback address `offset` ports above `base`.
fn port_at(base: u16, offset: u16) -> Result<SocketAddr, String> {
    let port = base
        .checked_add(offset)
        .ok_or_else(|| format!("port {base} + {offset} overflows"))?;
    Ok(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// `creek dev add-replica`: start a replica under the next free id on the
/// next ports, configured with the cluster's members and itself, ask the
/// cluster to add it, and serve until Ctrl-C.
/// The CA, the replicas' and the client `root`'s certificates in `dir`,
/// made for what is missing (a second start keeps the first's).
fn make_certs(dir: &std::path::Path, replicas: u16) -> Result<PathBuf, String> {
    if !dir.join("ca.crt").exists() {
        println!("{}", crate::certs_cmd::create_ca(dir, false)?);
    }
    for id in 1..=replicas {
        if !dir.join(format!("node-{id}.crt")).exists() {
            println!("{}", crate::certs_cmd::create_node(dir, id, &[], false)?);
        }
    }
    if !dir.join("client-root.crt").exists() {
        println!("{}", crate::certs_cmd::create_client(dir, "root", false)?);
    }
    Ok(dir.to_owned())
}

/// The root token kept in `dir/root.token` (made there, readable by its
/// owner only, if missing): its hash goes into every replica's `[auth]`.
fn root_token(dir: &std::path::Path) -> Result<creek_server::auth::Token, String> {
    let path = dir.join("root.token");
    if path.exists() {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        return creek_server::auth::Token::parse(&text)
            .map_err(|e| format!("{}: {e} (remove it to make a new one)", path.display()));
    }
    let token = creek_server::auth::Token::generate(true)?;
    crate::certs_cmd::write_file(&path, &format!("{token}\n"), true)?;
    println!("made the root token {}", path.display());
    Ok(token)
}

fn add_replica(args: &DevArgs) -> Result<(), String> {
    if args.secure {
        return Err(
            "`creek dev --secure add-replica` is not supported yet: add the replica \
                    with `creek certs create-node` and `creek serve --certs-dir`"
                .into(),
        );
    }
    let addrs: Vec<String> = (0..args.replicas.max(1))
        .map(|i| port_at(args.client_port, i).map(|a| a.to_string()))
        .collect::<Result<_, _>>()?;
    serve_cmd::run_server(creek_server::default_io_threads(), |panics| async move {
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
             creek serve --config {} (the next `creek dev` starts it too)",
            server.client_addr(),
            file.display()
        );
        serve_cmd::serve_until_stopped(server, panics, false).await
    })
}

/// `creek dev add-shard`: list a new shard in the directory's map, then
/// run its replicas here until Ctrl-C.
fn add_shard(args: &DevArgs) -> Result<(), String> {
    if args.secure {
        return Err(
            "`creek dev --secure add-shard` is not supported yet: start the shard's replicas \
             with `creek serve` and list them with `creek shards add-shard`"
                .into(),
        );
    }
    let first = port_at(args.client_port, 0)?.to_string();
    serve_cmd::run_server(creek_server::default_io_threads(), |panics| async move {
        let cluster = creek_client::Cluster::connect([first.clone()])
            .await
            .map_err(|e| format!("no `creek dev` replica answered at {first}: {e}"))?;
        let directory = cluster
            .directory()
            .await
            .map_err(|e| format!("the directory does not answer: {e}"))?
            .ok_or("this dev cluster has no directory: start it with --shards 2 or more")?;
        let strong = |name: &'static str, call_args: Vec<Value>| {
            let directory = directory.clone();
            async move {
                let op = directory
                    .invoke(name, call_args, Levels::Strong)
                    .await
                    .map_err(|e| format!("{name}: {e}"))?;
                let view = op.final_view().await.map_err(|e| format!("{name}: {e}"))?;
                view.outcome.map_err(|abort| format!("{name}: {abort}"))
            }
        };
        let Value::Bytes(held) = strong("directory.map", Vec::new()).await? else {
            return Err("the directory holds no map yet: try again in a moment".into());
        };
        let map = creek_shard::decode(&held).map_err(|e| e.to_string())?;
        let shard = creek_shard::ShardId(map.shards.keys().map(|s| s.0).max().unwrap_or(0) + 1);
        let last_id = map
            .shards
            .values()
            .chain(std::iter::once(&map.directory))
            .flat_map(|g| g.replicas.keys().copied())
            .max()
            .unwrap_or(0);
        let mut group = Vec::new();
        for id in (last_id + 1..).take(usize::from(args.replicas.max(1))) {
            group.push(ReplicaAddr {
                id,
                peer_addr: port_at(args.peer_port, id - 1)?,
                client_addr: port_at(args.client_port, id - 1)?,
            });
        }
        let mut next = map.clone();
        next.shards.insert(
            shard,
            creek_shard::Shard {
                replicas: group
                    .iter()
                    .map(|r| {
                        let endpoint = creek_shard::Endpoint {
                            client: r.client_addr.to_string(),
                            peer: r.peer_addr.to_string(),
                        };
                        (r.id, endpoint)
                    })
                    .collect(),
            },
        );
        next.epoch += 1;
        let epoch = i64::try_from(map.epoch).unwrap_or(i64::MAX);
        strong(
            "directory.set",
            vec![Value::Int(epoch), Value::Bytes(creek_shard::encode(&next))],
        )
        .await?;
        let mut servers = Vec::new();
        for r in &group {
            let dir = args.data_dir.join(format!("r{}", r.id));
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            let map_file = dir.join("shard-map.bin");
            std::fs::write(&map_file, creek_shard::encode(&next))
                .map_err(|e| format!("writing {}: {e}", map_file.display()))?;
            let mut config = ServerConfig::new(r.id, group.clone(), dir);
            config.workers = 1;
            config.shard_map = Some(map_file);
            config.allow_fault_injection = args.allow_fault_injection;
            if args.metrics_port != 0 {
                config.metrics_addr = Some(port_at(args.metrics_port, r.id - 1)?);
            }
            config.validate().map_err(|e| e.to_string())?;
            let file = args.data_dir.join(format!("r{}.toml", r.id));
            let toml = config.to_toml().map_err(|e| e.to_string())?;
            std::fs::write(&file, toml).map_err(|e| format!("writing {}: {e}", file.display()))?;
            servers.push(Server::start(config).await.map_err(|e| e.to_string())?);
        }
        let ids: Vec<String> = group.iter().map(|r| r.id.to_string()).collect();
        println!(
            "creek dev: shard {} added (replicas {}, map epoch {}), owning no key yet: give it \
             keys with `creek shards rebalance --addr {first}`. Ctrl-C stops its replicas; \
             restart one with creek serve --config DATA_DIR/rN.toml",
            shard.0,
            ids.join(", "),
            next.epoch
        );
        let mut rest = Vec::new();
        let last = servers.pop().ok_or("no replica to run")?;
        for server in servers {
            rest.push(tokio::spawn(serve_cmd::serve_until_stopped(
                server,
                panics.clone(),
                false,
            )));
        }
        let mut result = serve_cmd::serve_until_stopped(last, panics, false).await;
        for r in rest {
            let done = r.await.map_err(|e| e.to_string()).and_then(|r| r);
            result = result.and(done);
        }
        result
    })
}

/// The configurations of a sharded dev cluster — its shards and its
/// directory group of three — with the map it was formed with kept in
/// DATA_DIR/shard-map.bin: made with a new cluster id the first time,
/// read back on the next start (it must describe the same shards). Each
/// replica keeps its own copy of the newest map it knows in its data
/// directory.
fn local_shards(args: &DevArgs) -> Result<Vec<ServerConfig>, String> {
    let map_path = args.data_dir.join("shard-map.bin");
    let kept = match std::fs::read(&map_path) {
        Ok(bytes) => Some(
            creek_shard::decode(&bytes.into())
                .map_err(|e| format!("{}: {e}", map_path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("reading {}: {e}", map_path.display())),
    };
    let cluster = kept.as_ref().map_or_else(new_cluster_id, |m| m.cluster);
    let (configs, map) = creek_server::shards::local_shards(
        args.shards,
        args.replicas,
        DIRECTORY_REPLICAS,
        args.client_port,
        args.peer_port,
        &args.data_dir,
        cluster,
    )
    .map_err(|e| e.to_string())?;
    match kept {
        Some(kept) if kept == map => {}
        Some(kept) => {
            return Err(format!(
                "{} describes another cluster ({} shards, epoch {}): start `creek dev` with \
                 the flags that formed it, or with another --data-dir",
                map_path.display(),
                kept.shards.len(),
                kept.epoch
            ))
        }
        None => {
            std::fs::create_dir_all(&args.data_dir)
                .map_err(|e| format!("creating {}: {e}", args.data_dir.display()))?;
            std::fs::write(&map_path, creek_shard::encode(&map))
                .map_err(|e| format!("writing {}: {e}", map_path.display()))?;
        }
    }
    creek_server::shards::write_map_files(&configs, &map).map_err(|e| e.to_string())?;
    Ok(configs)
}

/// A cluster id unlikely to repeat: the clock's nanoseconds mixed with the
/// process id.
fn new_cluster_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ (u64::from(std::process::id()) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}
