//! etcd: three members on loopback with etcd's defaults (the WAL fsynced
//! before a put is acknowledged), the binary scripts/bench-peers-setup.sh
//! builds. A put is the write; latency against the leader, throughput
//! with client `i` connected to member `i mod 3`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use etcd_client::Client;
use serde_json::json;

use super::driver::{self, Conn};
use super::procs::{self, Procs};
use super::Settings;

/// Members in the cluster.
const MEMBERS: usize = 3;

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

async fn connect(endpoint: &str) -> Result<Client, String> {
    Client::connect([endpoint], None)
        .await
        .map_err(|e| format!("connecting to etcd at {endpoint}: {e}"))
}

/// `v3.6.14 (git fc04cf7)` from `etcd --version`'s lines.
fn version(etcd: &Path) -> Result<String, String> {
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
async fn leader(endpoints: &[String]) -> Result<Option<usize>, String> {
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

/// Start the members, measure, stop them: the report's `etcd` object.
pub(crate) async fn measure(
    settings: &Settings,
    etcd: &Path,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    if !etcd.exists() {
        return Err(format!(
            "no etcd binary at {} (scripts/bench-peers-setup.sh builds it and exports CREEK_BENCH_ETCD; or pass --etcd-bin)",
            etcd.display()
        ));
    }
    let version = version(etcd)?;
    let mut procs = Procs::new("etcd", "KILL")?;
    // The cluster's ports, reserved together.
    let mut clients: Vec<SocketAddr> = creek_harness::ports::reserve(2 * MEMBERS)?;
    let peers: Vec<SocketAddr> = clients.split_off(MEMBERS);
    let initial = peers
        .iter()
        .enumerate()
        .map(|(i, p)| format!("m{}=http://{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    for i in 0..MEMBERS {
        let (client, peer) = (
            format!("http://{}", clients[i]),
            format!("http://{}", peers[i]),
        );
        let mut cmd = Command::new(etcd);
        cmd.arg("--name")
            .arg(format!("m{}", i + 1))
            .arg("--data-dir")
            .arg(procs.dir.join(format!("m{}", i + 1)))
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
        procs.spawn(&format!("m{}", i + 1), cmd)?;
    }
    let endpoints: Vec<String> = clients.iter().map(|a| format!("http://{a}")).collect();
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
