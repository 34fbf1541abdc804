//! A cluster of real `creek serve` processes on loopback for end-to-end
//! tests: free ports, one data directory per replica, SIGKILL and restart,
//! transport faults through `Admin.SetFaults`. Every process is killed and
//! every directory removed when the cluster is dropped.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use creek_harness::launcher::{Launch, OnDrop};

use creek_proto::pb;
use creek_proto::pb::admin_client::AdminClient;
use creek_proto::pb::creek_client::CreekClient;
use creek_server::ServerConfig;
use tonic::transport::Channel;

pub use creek_types::value::Value;

pub mod sharded;

/// `creek txn --addr ADDR` with `input` on its standard input: (exit code,
/// stdout, stderr).
pub fn creek_txn(addr: &str, input: &str) -> (Option<i32>, String, String) {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["txn", "--addr", addr])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run creek txn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write the transaction");
    let out = child.wait_with_output().expect("creek txn");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run the CLI: its exit code, standard output and standard error.
pub fn creek(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(args)
        .output()
        .expect("creek");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `report[key]` as a number (any JSON number), or a panic naming it.
pub fn number(report: &serde_json::Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {report}"))
}

/// Run `creek ARGS` (a `bench … --json` command that starts and stops its
/// own servers), killing it past `limit`, and return its one JSON line.
pub fn run_json_command(args: &[&str], limit: Duration) -> serde_json::Value {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn creek {args:?}: {e}"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the command") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("creek {args:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout).expect("read stdout");
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut stderr).expect("read stderr");
    }
    assert!(status.success(), "exit {status}; stderr:\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line expected:\n{stdout}");
    serde_json::from_str(lines[0]).expect("the report is JSON")
}

/// A cluster of `creek serve` processes (`creek_harness`'s, which this
/// dereferences to for its endpoints, directory and processes) with the
/// test defaults and the test's clients.
pub struct Cluster {
    procs: creek_harness::Cluster,
    /// How the test's clients reach a TLS cluster (`None`: plaintext).
    pub tls: Option<tonic::transport::ClientTlsConfig>,
    /// The bearer token the cluster's own admin calls (faults) send, for a
    /// cluster that checks users.
    pub token: Option<String>,
}

impl std::ops::Deref for Cluster {
    type Target = creek_harness::Cluster;
    fn deref(&self) -> &creek_harness::Cluster {
        &self.procs
    }
}

impl std::ops::DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut creek_harness::Cluster {
        &mut self.procs
    }
}

/// Resident memory of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A loopback address with a port free now and never handed out before in
/// this process (`creek_harness::ports`): two clusters started by parallel
/// tests must not share one.
pub fn free_addr() -> SocketAddr {
    creek_harness::ports::reserve_one().expect("a free port")
}

/// The test defaults every replica's configuration starts from.
fn test_defaults(c: &mut ServerConfig) {
    c.allow_fault_injection = true;
    c.workers = 1;
    c.checkpoint_every_secs = 1;
}

impl Cluster {
    /// Start `n` replicas and wait until they have a leader.
    pub async fn start(n: usize) -> Cluster {
        Self::start_with(n, |_| {}).await
    }

    /// Like [`Cluster::start`], with `edit` applied to every replica's
    /// configuration.
    pub async fn start_with(n: usize, edit: impl Fn(&mut ServerConfig)) -> Cluster {
        let mut c = Self::prepare_with(n, edit);
        c.spawn_all();
        c.wait_for_leader(Duration::from_secs(20)).await;
        c
    }

    /// `n` replicas' configuration files (the test defaults, then `edit`),
    /// none started: `spawn_all` starts them.
    pub fn prepare_with(n: usize, edit: impl Fn(&mut ServerConfig)) -> Cluster {
        let dir = std::env::temp_dir().join(format!(
            "creek-e2e-{}-{}",
            std::process::id(),
            free_addr().port()
        ));
        let launch = Launch {
            on_drop: OnDrop::RemoveDirUnlessPanicking,
            ..Launch::new(env!("CARGO_BIN_EXE_creek").into(), dir).log_filter("info")
        };
        let c = Cluster {
            procs: creek_harness::Cluster::on_loopback(launch, n).expect("cluster"),
            tls: None,
            token: None,
        };
        for i in 0..n {
            c.configure(i, &edit);
        }
        c
    }

    /// Start every replica not running.
    pub fn spawn_all(&mut self) {
        for i in 0..self.len() {
            if !self.is_running(i) {
                self.spawn(i);
            }
        }
    }

    /// Rewrite replica `i`'s configuration file: the test defaults, then
    /// `edit` (it takes effect at the next restart).
    pub fn configure(&self, i: usize, edit: impl FnOnce(&mut ServerConfig)) {
        let all: Vec<usize> = (0..self.len()).collect();
        self.procs
            .configure(i, &all, |c| {
                test_defaults(c);
                edit(c);
            })
            .expect("config");
    }

    /// Start a new replica process under the next id, configured with the
    /// replicas `members` (indexes) and itself: what an operator starts
    /// before or after `creek admin add-replica`. Returns its index.
    pub fn spawn_new(&mut self, members: &[usize]) -> usize {
        let i = self.procs.push_on_loopback().expect("ports");
        self.procs
            .configure(i, members, test_defaults)
            .expect("config");
        self.spawn(i);
        i
    }

    fn spawn(&mut self, i: usize) {
        self.procs.spawn(i).expect("spawn creek serve");
    }

    /// SIGKILL replica `i`.
    pub fn kill(&mut self, i: usize) {
        let _ = self.procs.kill(i);
    }

    /// Start replica `i` again from its data directory and wait until it
    /// answers.
    pub async fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.status(i).await.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "replica {} did not come back; see {}",
            i + 1,
            self.dir.display()
        );
    }

    /// A channel to replica `i`'s client port, TLS if `self.tls`.
    pub async fn channel(&self, i: usize) -> Result<Channel, tonic::transport::Error> {
        match &self.tls {
            None => {
                Channel::from_shared(format!("http://{}", self.clients[i]))
                    .expect("uri")
                    .connect()
                    .await
            }
            Some(tls) => {
                Channel::from_shared(format!("https://{}", self.clients[i]))
                    .expect("uri")
                    .tls_config(tls.clone())?
                    .connect()
                    .await
            }
        }
    }

    pub async fn client(&self, i: usize) -> CreekClient<Channel> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.channel(i).await.map(CreekClient::new) {
                Ok(c) => return c,
                Err(e) if Instant::now() > deadline => panic!("connect to replica {}: {e}", i + 1),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    pub async fn status(&self, i: usize) -> Option<pb::StatusReply> {
        let mut c = CreekClient::new(self.channel(i).await.ok()?);
        c.status(pb::StatusRequest {})
            .await
            .ok()
            .map(|r| r.into_inner())
    }

    /// Index of the replica that is leader, once one is known to all live
    /// replicas.
    pub async fn wait_for_leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            for i in 0..self.len() {
                if !self.is_running(i) {
                    continue;
                }
                if let Some(s) = self.status(i).await {
                    if s.role == "leader" {
                        return i;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "no leader within {within:?}; logs in {}",
            self.dir.display()
        );
    }

    /// Add `delay` of one-way latency to every link, on every replica's
    /// sending side.
    pub async fn delay_all(&self, delay: Duration) {
        for i in 0..self.len() {
            let fault = pb::LinkFault {
                delay_us: delay.as_micros() as u64,
                ..Default::default()
            };
            self.set_links(i, Some(fault)).await;
        }
    }

    /// Cut replica `i` off from every other replica (or heal it).
    pub async fn isolate(&self, i: usize, partitioned: bool) {
        let fault = pb::LinkFault {
            partitioned: true,
            ..Default::default()
        };
        self.set_links(i, partitioned.then_some(fault)).await;
    }

    /// Replica `i`'s links to every other replica get `fault` (`None`:
    /// no fault).
    async fn set_links(&self, i: usize, fault: Option<pb::LinkFault>) {
        let mut admin = AdminClient::new(self.channel(i).await.expect("admin"));
        let links = (0..self.len())
            .filter(|j| *j != i)
            .filter_map(|j| {
                fault.map(|f| pb::LinkFault {
                    peer: (j + 1) as u32,
                    ..f
                })
            })
            .collect();
        let mut request = tonic::Request::new(pb::SetFaultsRequest { links });
        if let Some(token) = &self.token {
            let bearer = format!("Bearer {token}").parse().expect("ascii token");
            request.metadata_mut().insert("authorization", bearer);
        }
        admin.set_faults(request).await.expect("set faults");
    }
}

pub fn b(s: &str) -> Value {
    Value::Bytes(bytes::Bytes::copy_from_slice(s.as_bytes()))
}

pub fn req(proc_: &str, args: &[Value], levels: &[pb::Level]) -> pb::InvokeRequest {
    pb::InvokeRequest {
        procedure: proc_.to_owned(),
        args: args.iter().map(creek_proto::to_wire).collect(),
        levels: levels.iter().map(|l| *l as i32).collect(),
        ..Default::default()
    }
}

/// A view as the test reads it.
#[derive(Clone, Debug, PartialEq)]
pub enum Got {
    Preliminary(Result<Value, String>),
    Final(Result<Value, String>),
    Confirmed,
    /// A snapshot view and the commit time it read at.
    Snapshot(Result<Value, String>, u64),
}

fn got(v: pb::View) -> Got {
    use pb::view::{Kind, Outcome};
    let outcome = match v.outcome {
        Some(Outcome::Value(v)) => Ok(creek_proto::from_wire(&v).expect("valid value")),
        Some(Outcome::Abort(a)) => Err(a),
        None => Ok(Value::Nil),
    };
    match Kind::try_from(v.kind).expect("kind") {
        Kind::Preliminary => Got::Preliminary(outcome),
        Kind::Final => Got::Final(outcome),
        Kind::Confirmed => Got::Confirmed,
        Kind::Snapshot => Got::Snapshot(outcome, v.time),
        Kind::Unspecified => panic!("unspecified view kind"),
    }
}

/// Invoke and collect every view until the stream ends (or `within`).
pub async fn call(
    c: &mut CreekClient<Channel>,
    r: pb::InvokeRequest,
    within: Duration,
) -> Result<Vec<Got>, tonic::Status> {
    let mut request = tonic::Request::new(r);
    request.set_timeout(within);
    let mut stream = c.invoke(request).await?.into_inner();
    let mut views = Vec::new();
    while let Some(v) = stream.message().await? {
        views.push(got(v));
    }
    Ok(views)
}

/// The last outcome in `views` (a confirmation repeats the preliminary).
pub fn result(views: &[Got]) -> Result<Value, String> {
    let mut last = Err("no view".to_owned());
    for v in views {
        match v {
            Got::Preliminary(o) | Got::Final(o) | Got::Snapshot(o, _) => last = o.clone(),
            Got::Confirmed => {}
        }
    }
    last
}

/// Read `key` at replica `i` with a strong op's final view.
pub async fn strong_get(cluster: &Cluster, i: usize, key: &str) -> Value {
    let mut c = cluster.client(i).await;
    let views = call(
        &mut c,
        req("kv.get", &[b(key)], &[pb::Level::Strong]),
        Duration::from_secs(20),
    )
    .await
    .expect("strong get");
    result(&views).expect("get never aborts")
}

/// The `creek_native_connections` gauge in the `/metrics` text `scrape`
/// returns, once two scrapes 100 ms apart agree (a dropped client's
/// connection closes a moment later).
#[allow(dead_code)]
pub async fn native_connections<F, Fut>(mut scrape: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let mut last = None;
    for _ in 0..50 {
        let open = scrape()
            .await
            .lines()
            .find_map(|l| l.strip_prefix("creek_native_connections "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        if open.is_some() && open == last {
            return open.unwrap_or_default();
        }
        last = open;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("creek_native_connections did not settle: {last:?}");
}
