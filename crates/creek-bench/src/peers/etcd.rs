//! etcd: three members on loopback with etcd's defaults (the WAL fsynced
//! before a put is acknowledged), the binary scripts/bench-peers-setup.sh
//! builds. A put is the write; latency against the leader, throughput
//! with client `i` connected to member `i mod 3`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use etcd_client::Client;
use serde_json::json;

use super::driver::{self, Conn};
use super::procs::{self, Procs};
use super::Settings;

/// Members in the cluster.
pub(crate) const MEMBERS: usize = 3;

struct EtcdConn(Client);

impl Conn for EtcdConn {
    async fn write(&mut self, n: u64, value: &[u8]) -> Result<(), String> {
        self.0
            .put(driver::key(n), value.to_vec(), None)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

pub(crate) async fn connect(endpoint: &str) -> Result<Client, String> {
    Client::connect([endpoint], None)
        .await
        .map_err(|e| format!("connecting to etcd at {endpoint}: {e}"))
}

/// `v3.6.14 (git fc04cf7)` from `etcd --version`'s lines.
pub(crate) fn version(etcd: &Path) -> Result<String, String> {
    let out = Command::new(etcd)
        .arg("--version")
        .output()
        .map_err(|e| format!("running {} --version: {e}", etcd.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    match (field("etcd Version:"), field("Git SHA:")) {
        (Some(v), Some(sha)) => Ok(format!("v{v} (git {sha})")),
        (Some(v), None) => Ok(format!("v{v}")),
        _ => Err(format!(
            "{} --version printed no version: {text:?}",
            etcd.display()
        )),
    }
}

/// The index of the member all members name as leader, once they do.
pub(crate) async fn leader(endpoints: &[String]) -> Result<Option<usize>, String> {
    let mut ids = Vec::with_capacity(endpoints.len());
    let mut leaders = Vec::with_capacity(endpoints.len());
    for ep in endpoints {
        let mut c = connect(ep).await?;
        let s = c.status().await.map_err(|e| e.to_string())?;
        ids.push(s.header().map_or(0, |h| h.member_id()));
        leaders.push(s.leader());
    }
    let first = leaders.first().copied().unwrap_or(0);
    if first == 0 || leaders.iter().any(|&l| l != first) {
        return Ok(None);
    }
    Ok(ids.iter().position(|&id| id == first))
}

/// The members' addresses and what starts each one.
pub(crate) struct Members {
    etcd: PathBuf,
    dir: PathBuf,
    clients: Vec<SocketAddr>,
    peers: Vec<SocketAddr>,
}

impl Members {
    /// The members' client URLs, in member order.
    pub(crate) fn endpoints(&self) -> Vec<String> {
        self.clients.iter().map(|a| format!("http://{a}")).collect()
    }

    /// The process name of member `i` (0-based).
    pub(crate) fn name(i: usize) -> String {
        format!("m{}", i + 1)
    }

    /// The command that starts member `i` (0-based) with etcd's defaults;
    /// started again, it rejoins with its data directory.
    pub(crate) fn command(&self, i: usize) -> Command {
        let initial = self
            .peers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}=http://{p}", Members::name(i)))
            .collect::<Vec<_>>()
            .join(",");
        let (client, peer) = (
            format!("http://{}", self.clients[i]),
            format!("http://{}", self.peers[i]),
        );
        let mut cmd = Command::new(&self.etcd);
        cmd.arg("--name")
            .arg(Members::name(i))
            .arg("--data-dir")
            .arg(self.dir.join(Members::name(i)))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &initial,
                "--initial-cluster-state",
                "new",
            ])
            .args([
                "--initial-cluster-token",
                "creek-bench-peers",
                "--log-level",
                "warn",
            ]);
        cmd
    }
}

/// Start [`MEMBERS`] members on loopback ports reserved together, in a
/// directory of their own.
pub(crate) fn start(etcd: &Path) -> Result<(Procs, Members), String> {
    if !etcd.exists() {
        return Err(format!(
            "no etcd binary at {} (scripts/bench-peers-setup.sh builds it and exports CREEK_BENCH_ETCD; or pass --etcd-bin)",
            etcd.display()
        ));
    }
    let mut procs = Procs::new("etcd", "KILL")?;
    let mut clients: Vec<SocketAddr> = creek_harness::ports::reserve(2 * MEMBERS)?;
    let peers: Vec<SocketAddr> = clients.split_off(MEMBERS);
    let members = Members {
        etcd: etcd.to_path_buf(),
        dir: procs.dir.clone(),
        clients,
        peers,
    };
    for i in 0..MEMBERS {
        procs.spawn(&Members::name(i), members.command(i))?;
    }
    Ok((procs, members))
}

/// Start the members, measure, stop them: the report's `etcd` object.
pub(crate) async fn measure(
    settings: &Settings,
    etcd: &Path,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let version = version(etcd)?;
    let (mut procs, members) = start(etcd)?;
    let endpoints = members.endpoints();
    let lead = procs::wait_for(&mut procs, "etcd elected no leader", || leader(&endpoints)).await?;
    eprintln!("bench peers: etcd {version} up, leader m{}", lead + 1);
    let put = driver::measure(
        "etcd put",
        settings,
        EtcdConn(connect(&endpoints[lead]).await?),
        |i| {
            let ep = endpoints[i % endpoints.len()].clone();
            async move { connect(&ep).await.map(EtcdConn) }
        },
    )
    .await?;
    procs.check_alive()?;
    drop(procs);
    let mut out = serde_json::Map::new();
    out.insert("version".into(), json!(version));
    out.insert("replicas".into(), json!(MEMBERS));
    out.insert("put".into(), put);
    Ok(out)
}
