//! `creek dev`: a local cluster on loopback, each replica its own
//! `creek serve` process, with a prompt to stop, start and kill replicas
//! (to watch a failover in one window). `creek dev add-replica` adds one
//! more replica to a running `creek dev` cluster.

use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use creek_server::{ReplicaAddr, Server, ServerConfig};

use crate::serve_cmd::{self, LogArgs, LogFormat};

/// Most replicas `creek dev` runs.
const REPLICAS_MAX: u16 = 9;
/// How long a started replica may take to open its client port.
const START_WAIT: Duration = Duration::from_secs(20);
/// How long `stop` waits for a replica to stop before it kills it.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// `creek dev`.
#[derive(clap::Args)]
pub struct DevArgs {
    /// Replicas in the cluster (1 to 9).
    #[arg(long, default_value_t = 3)]
    replicas: u16,
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
        return add_replica(args);
    }
    if !(1..=REPLICAS_MAX).contains(&args.replicas) {
        return Err(format!(
            "--replicas {}: a dev cluster has 1 to {REPLICAS_MAX} replicas (3 by default)",
            args.replicas
        ));
    }
    let mut cluster = DevCluster::configure(args, log)?;
    cluster.check_ports()?;
    for i in 0..cluster.replicas.len() {
        cluster.start(i)?;
    }
    cluster.wait_started()?;
    cluster.banner();
    let result = cluster.serve();
    let stopped = cluster.stop_all();
    result.and(stopped)
}

/// One replica of the dev cluster.
struct DevReplica {
    id: u16,
    config: PathBuf,
    log: PathBuf,
    client: SocketAddr,
    peer: SocketAddr,
    metrics: Option<SocketAddr>,
    child: Option<Child>,
}

struct DevCluster {
    replicas: Vec<DevReplica>,
    /// The certificate directory with `--secure`.
    certs: Option<PathBuf>,
    /// `--log-level` and `--log-format` for the replicas.
    log_flags: Vec<String>,
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
        let mut configs = ServerConfig::local_group(
            args.replicas,
            args.client_port,
            args.peer_port,
            &args.data_dir,
        )
        .map_err(|e| e.to_string())?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::fs::create_dir_all(&args.data_dir)
            .map_err(|e| format!("creating {}: {e}", args.data_dir.display()))?;
        let certs = if args.secure {
            Some(make_certs(&args.data_dir.join("certs"), args.replicas)?)
        } else {
            None
        };
        let root = match &certs {
            Some(dir) => Some(root_token(dir)?),
            None => None,
        };
        let mut replicas = Vec::new();
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
            c.workers = (cores / usize::from(args.replicas)).max(1);
            c.allow_fault_injection = args.allow_fault_injection;
            if args.metrics_port != 0 {
                c.metrics_addr = Some(port_at(args.metrics_port, i as u16)?);
            }
            c.validate().map_err(|e| e.to_string())?;
            let path = args.data_dir.join(format!("r{}.toml", c.id));
            let toml = c.to_toml().map_err(|e| e.to_string())?;
            std::fs::write(&path, toml).map_err(|e| format!("writing {}: {e}", path.display()))?;
            replicas.push(DevReplica::new(&args.data_dir, c));
        }
        for id in (args.replicas + 1)..=u16::MAX {
            let path = args.data_dir.join(format!("r{id}.toml"));
            if !path.exists() {
                break;
            }
            let c = ServerConfig::from_file(&path).map_err(|e| e.to_string())?;
            replicas.push(DevReplica::new(&args.data_dir, &c));
        }
        let mut log_flags = vec![
            "--log-format".to_owned(),
            match log.log_format {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            }
            .to_owned(),
        ];
        if let Some(level) = &log.log_level {
            log_flags.extend(["--log-level".to_owned(), level.clone()]);
        }
        Ok(DevCluster {
            replicas,
            certs,
            log_flags,
        })
    }

    /// Every port the replicas will listen on is free (another cluster on
    /// them would answer in their place).
    fn check_ports(&self) -> Result<(), String> {
        for r in &self.replicas {
            let ports = [
                ("client", Some(r.client)),
                ("peer", Some(r.peer)),
                ("metrics", r.metrics),
            ];
            for (what, addr) in ports {
                let Some(addr) = addr else { continue };
                if let Err(e) = std::net::TcpListener::bind(addr) {
                    return Err(format!(
                        "{addr}, replica {}'s {what} port, is taken ({e}): is another `creek \
                         dev` running? Stop it, or pick other ports with --client-port, \
                         --peer-port and --metrics-port",
                        r.id
                    ));
                }
            }
        }
        Ok(())
    }

    /// The index of replica `id`, as a command names it.
    fn index(&self, word: Option<&str>) -> Result<usize, String> {
        let ids: Vec<String> = self.replicas.iter().map(|r| r.id.to_string()).collect();
        let bad = || format!("name a replica: one of {}", ids.join(", "));
        let id: u16 = word.ok_or_else(bad)?.parse().map_err(|_| bad())?;
        self.replicas
            .iter()
            .position(|r| r.id == id)
            .ok_or_else(bad)
    }

    /// Start replica `i` as a `creek serve` process, in a process group of
    /// its own (Ctrl-C at the terminal reaches `creek dev`, which stops
    /// the replicas in turn) that stops if `creek dev` goes away.
    fn start(&mut self, i: usize) -> Result<(), String> {
        use std::os::unix::process::CommandExt;
        let r = &mut self.replicas[i];
        if r.child.is_some() {
            return Err(format!("replica {} is running", r.id));
        }
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&r.log)
            .map_err(|e| format!("opening {}: {e}", r.log.display()))?;
        let child = Command::new(exe)
            .args(&self.log_flags)
            .arg("serve")
            .arg("--config")
            .arg(&r.config)
            .arg("--stop-with-parent")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting replica {}: {e}", r.id))?;
        r.child = Some(child);
        Ok(())
    }

    /// Wait until every started replica accepts clients; a replica that
    /// exits instead fails the start, with the end of its log.
    fn wait_started(&mut self) -> Result<(), String> {
        let until = Instant::now() + START_WAIT;
        for r in &mut self.replicas {
            loop {
                if let Some(why) = r.exited() {
                    return Err(format!(
                        "replica {} did not start: {why}; {}",
                        r.id,
                        creek_server::replica_log::log_tail(&r.log)
                    ));
                }
                if std::net::TcpStream::connect_timeout(&r.client, Duration::from_millis(200))
                    .is_ok()
                {
                    break;
                }
                if Instant::now() > until {
                    return Err(format!(
                        "replica {} did not open {} within {START_WAIT:?}; its log: {}",
                        r.id,
                        r.client,
                        r.log.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    fn banner(&self) {
        let dir = self
            .replicas
            .first()
            .and_then(|r| r.log.parent())
            .map_or_else(String::new, |d| d.display().to_string());
        println!(
            "creek dev: {} replicas, each its own process; data and logs in {dir}",
            self.replicas.len()
        );
        for r in &self.replicas {
            let metrics = r
                .metrics
                .map(|a| format!("   console http://{a}/   metrics http://{a}/metrics"))
                .unwrap_or_default();
            println!("  replica {}  client {}{metrics}", r.id, r.client);
        }
        if let Some(a) = self.replicas.first().and_then(|r| r.metrics) {
            println!(
                "open http://{a}/ for the live console (every replica serves one; it shows a \
                 stopped or killed replica as down)"
            );
        }
        if let Some(dir) = &self.certs {
            let d = dir.display();
            println!(
                "TLS on every link (certificates in {d}); clients need the CA and a client \
                 certificate, and every call a token (the root token, admin on everything, \
                 is in {d}/root.token):\n  export CREEK_CA={d}/ca.crt CREEK_CERT={d}/client-root.crt \
                 CREEK_KEY={d}/client-root.key CREEK_TOKEN=$(cat {d}/root.token)\nthen make users \
                 with their own tokens: creek user add alice --role readwrite"
            );
        }
        println!(
            "try: creek call kv.put greeting hello     creek status\n\
             type `stop 2` / `start 2` / `kill 1` to watch a failover, `help` for more; \
             Ctrl-C stops the cluster"
        );
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
                        .map(|()| println!("replica {} started", self.replicas[i].id)),
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
        for r in &mut self.replicas {
            let state = match &r.child {
                Some(c) => format!("running (pid {})", c.id()),
                None => "stopped".to_owned(),
            };
            println!(
                "  replica {}  {state:<22} client {}  log {}",
                r.id,
                r.client,
                r.log.display()
            );
        }
    }

    /// SIGTERM replica `i` and wait for it (SIGKILL after [`STOP_WAIT`]).
    fn stop(&mut self, i: usize) -> Result<(), String> {
        let r = &mut self.replicas[i];
        let Some(child) = r.child.as_mut() else {
            return Err(format!("replica {} is not running", r.id));
        };
        terminate(child)?;
        let status = wait_for(child, STOP_WAIT)?;
        r.child = None;
        println!("replica {} stopped ({status})", r.id);
        Ok(())
    }

    /// SIGKILL replica `i`: a crash, as far as the others can tell.
    fn kill(&mut self, i: usize) -> Result<(), String> {
        let r = &mut self.replicas[i];
        let Some(mut child) = r.child.take() else {
            return Err(format!("replica {} is not running", r.id));
        };
        child
            .kill()
            .and_then(|()| child.wait())
            .map_err(|e| format!("killing replica {}: {e}", r.id))?;
        println!("replica {} killed", r.id);
        Ok(())
    }

    /// Say so when a replica exited by itself (it stays down until `start`).
    fn report_exits(&mut self) {
        for r in &mut self.replicas {
            if let Some(why) = r.exited() {
                r.child = None;
                println!(
                    "\nreplica {} exited by itself: {why}; {}\n(`start {}` starts it again)",
                    r.id,
                    creek_server::replica_log::log_tail(&r.log),
                    r.id
                );
            }
        }
    }

    /// Stop every running replica; an error names those that did not stop
    /// cleanly.
    fn stop_all(&mut self) -> Result<(), String> {
        println!("stopping…");
        for r in &mut self.replicas {
            if let Some(c) = r.child.as_mut() {
                let _ = terminate(c);
            }
        }
        let mut failed = Vec::new();
        for r in &mut self.replicas {
            if let Some(mut c) = r.child.take() {
                match wait_for(&mut c, STOP_WAIT) {
                    Ok(status) if status.success() => {}
                    Ok(status) => failed.push(format!(
                        "replica {} exited with {status} (log {})",
                        r.id,
                        r.log.display()
                    )),
                    Err(e) => failed.push(e),
                }
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    }
}

impl DevReplica {
    fn new(dir: &Path, c: &ServerConfig) -> DevReplica {
        DevReplica {
            id: c.id,
            config: dir.join(format!("r{}.toml", c.id)),
            log: dir.join(format!("r{}.log", c.id)),
            client: c.me().client_addr,
            peer: c.me().peer_addr,
            metrics: c.metrics_addr,
            child: None,
        }
    }

    /// Why the replica's process ended, if it did by itself.
    fn exited(&mut self) -> Option<String> {
        match self.child.as_mut()?.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!("it exited ({status})")),
            Err(e) => Some(format!("it cannot be waited on ({e})")),
        }
    }
}

impl Drop for DevCluster {
    /// Whatever went wrong, no replica outlives `creek dev`.
    fn drop(&mut self) {
        for r in &mut self.replicas {
            if let Some(mut c) = r.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn prompt(interactive: bool) {
    if interactive {
        print!("creek dev> ");
        let _ = std::io::stdout().flush();
    }
}

/// Send SIGTERM (the replica stops cleanly).
fn terminate(child: &Child) -> Result<(), String> {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .map_err(|e| format!("running kill: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -TERM {} failed ({status})", child.id()))
    }
}

/// Wait up to `limit` for `child` to exit, then SIGKILL it.
fn wait_for(child: &mut Child, limit: Duration) -> Result<std::process::ExitStatus, String> {
    let until = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status);
        }
        if Instant::now() > until {
            let _ = child.kill();
            return child.wait().map_err(|e| e.to_string());
        }
        std::thread::sleep(Duration::from_millis(20));
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
