//! The `creek serve` processes a benchmark starts on loopback, with the
//! server defaults or settings of its own, and can kill, wipe and restart
//! one at a time: a `creek_harness` [`Cluster`](creek_harness::Cluster)
//! of the command this process is (`current_exe`). Replica `i`'s
//! configuration is `r{i}.toml`, its log `r{i}.log` and its data directory
//! `r{i}/` in one temporary directory, which goes with the processes when
//! the value is dropped (on error and on Ctrl-C too).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use creek_client::TlsOptions;
use creek_harness::launcher::Launch;
use creek_server::ServerConfig;

/// `creek serve` processes, killed and their directory removed on drop.
pub(crate) type Servers = creek_harness::Cluster;

/// `creek certs create-local` for `n` replicas into `dir`, run as the
/// command this process is (the one whose `creek serve` the benchmarks
/// start): what it prints stays off the benchmark's standard output.
fn create_certs(dir: &Path, n: u16) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["certs", "create-local", "--replicas"])
        .arg(n.to_string())
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting creek certs: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let err = err.trim();
    Err(err.strip_prefix("creek: ").unwrap_or(err).to_owned())
}

/// Start `n` replicas on loopback ports reserved together, in a fresh
/// directory named after `name` and this process. Each runs with the
/// server defaults, then `edit`; its log keeps `log_filter` (`RUST_LOG`).
/// With `tls`, the client and peer links run TLS with the certificates
/// `creek certs create-local` makes, in [`certs_dir`]; clients connect
/// with [`client_tls`]. A setting that does not validate fails before any
/// process starts.
pub(crate) fn start(
    n: usize,
    name: &str,
    log_filter: &str,
    tls: bool,
    edit: impl Fn(&mut ServerConfig),
) -> Result<Servers, String> {
    let mut clients = creek_harness::ports::reserve(2 * n)?;
    let peers = clients.split_off(n);
    start_on(clients, peers, 1, name, log_filter, tls, edit)
}

/// Start `shards` shards of `per_shard` replicas each and the directory
/// group's [`DIRECTORY`] (the last ones), keys hashed over the shards, as
/// [`start`] does one group.
pub(crate) fn start_sharded(
    shards: usize,
    per_shard: usize,
    name: &str,
    log_filter: &str,
    edit: impl Fn(&mut ServerConfig),
) -> Result<Servers, String> {
    let n = shards * per_shard + DIRECTORY;
    let mut clients = creek_harness::ports::reserve(2 * n)?;
    let peers = clients.split_off(n);
    start_on(clients, peers, shards, name, log_filter, false, edit)
}

/// Replica certificates made beyond the replicas started, for those a run
/// adds (`creek chaos` adds up to six).
const SPARE_CERTS: usize = 8;

/// The file, in the servers' directory, a sharded cluster's replicas read
/// the map from.
pub(crate) const MAP_FILE: &str = "shard-map.bin";

/// Replicas of the directory group a cluster of several shards runs
/// beside them (it holds the map and sequences operations across shards).
pub(crate) const DIRECTORY: usize = 3;

/// [`start`] on the given client and peer endpoints (one of each per
/// replica), as `shards` shards of equal size (replica ids counting up
/// across them, keys hashed over them, the map in `shard-map.bin` of the
/// directory), with more than one shard the last [`DIRECTORY`] endpoints
/// the directory group's.
fn start_on(
    clients: Vec<SocketAddr>,
    peers: Vec<SocketAddr>,
    shards: usize,
    name: &str,
    log_filter: &str,
    tls: bool,
    edit: impl Fn(&mut ServerConfig),
) -> Result<Servers, String> {
    let n = clients.len();
    let dir = std::env::temp_dir().join(format!("creek-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let launch = Launch::new(exe, dir).log_filter(log_filter);
    // Owned from here: whatever fails below, the drop cleans up.
    let mut servers = Servers::on(launch, clients, peers)?;
    let certs = certs_dir(&servers);
    if tls {
        // Certificates for the replicas a run may add too.
        let n = u16::try_from(n + SPARE_CERTS).map_err(|_| format!("{n} replicas are too many"))?;
        create_certs(&certs, n)?;
    }
    let edit = |c: &mut ServerConfig| {
        if tls {
            c.tls = Some(creek_server::TlsConfig::in_dir(&certs, c.id));
        }
        edit(c);
    };
    let directory = if shards > 1 { DIRECTORY } else { 0 };
    let per_shard = n.saturating_sub(directory) / shards.max(1);
    let map_path = servers.dir.join(MAP_FILE);
    if shards > 1 {
        write_map(&servers, shards, &map_path)?;
    }
    for i in 0..n {
        let first = if i >= n - directory {
            n - directory
        } else {
            i / per_shard * per_shard
        };
        let size = if i >= n - directory {
            directory
        } else {
            per_shard
        };
        let members: Vec<usize> = (first..first + size).collect();
        servers.configure_valid(i, &members, |c| {
            if shards > 1 {
                c.shard_map = Some(map_path.clone());
                c.directory = i >= n - directory;
            }
            edit(c);
        })?;
    }
    for i in 0..n {
        servers.spawn(i)?;
    }
    Ok(servers)
}

/// The map of `shards` shards of equal size over `servers`' replicas but
/// the last [`DIRECTORY`] (the directory group's), keys hashed evenly,
/// written to `path`.
fn write_map(servers: &Servers, shards: usize, path: &Path) -> Result<(), String> {
    let all = servers.clients.len();
    let n = all
        .checked_sub(DIRECTORY)
        .ok_or("too few replicas for a directory group")?;
    if shards == 0 || !n.is_multiple_of(shards) {
        return Err(format!(
            "{n} replicas do not make {shards} shards of equal size"
        ));
    }
    let ids: Vec<creek_shard::ShardId> = (0..shards)
        .map(|s| creek_shard::ShardId(s as u16))
        .collect();
    let mut map = creek_shard::ShardMap::hashed(std::process::id().into(), &ids);
    for i in 0..n {
        let shard = creek_shard::ShardId((i / (n / shards)) as u16);
        let endpoint = creek_shard::Endpoint {
            client: servers.clients[i].to_string(),
            peer: servers.peers[i].to_string(),
        };
        if let Some(s) = map.shards.get_mut(&shard) {
            s.replicas.insert((i + 1) as u16, endpoint);
        }
    }
    for i in n..all {
        let endpoint = creek_shard::Endpoint {
            client: servers.clients[i].to_string(),
            peer: servers.peers[i].to_string(),
        };
        map.directory.replicas.insert((i + 1) as u16, endpoint);
    }
    map.validate().map_err(|e| e.to_string())?;
    std::fs::write(path, creek_shard::encode(&map))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Make room for a new replica (id `len + 1`) on loopback ports reserved
/// together, configured with the group `members` and `edit`, and start it.
/// Returns its 0-based index.
pub(crate) fn add(
    servers: &mut Servers,
    members: &[usize],
    edit: impl Fn(&mut ServerConfig),
) -> Result<usize, String> {
    let i = servers.push_on_loopback()?;
    servers.configure_valid(i, members, edit)?;
    servers.spawn(i)?;
    Ok(i)
}

/// Where [`start`] puts the certificates when asked for TLS.
pub(crate) fn certs_dir(servers: &Servers) -> PathBuf {
    servers.dir.join("certs")
}

/// What a client connects with to servers started with TLS: the CA and
/// the client `root`'s certificate and key.
pub(crate) fn client_tls(servers: &Servers) -> Result<TlsOptions, String> {
    let d = certs_dir(servers);
    TlsOptions::from_files(
        &d.join("ca.crt"),
        Some(&d.join("client-root.crt")),
        Some(&d.join("client-root.key")),
    )
    .map_err(|e| e.to_string())
}

/// The cluster a benchmark measures: servers it started (stopped with
/// this value), or a running cluster attached to.
pub(crate) struct Target {
    /// The servers started, if any.
    pub(crate) servers: Option<Servers>,
    /// The replicas' client endpoints.
    pub(crate) clients: Vec<SocketAddr>,
    /// The replicas' `/metrics` endpoints (none when attached).
    pub(crate) metrics: Vec<SocketAddr>,
    /// What clients connect with: TLS options when the servers were
    /// started with TLS, `None` for plaintext.
    pub(crate) tls: Option<TlsOptions>,
}

impl Target {
    /// Attach to `attach` if it names replicas, else start `shards` shards
    /// of `n` replicas with the server defaults, with TLS on the client
    /// and peer links if `tls`. An attached cluster is measured in
    /// plaintext: `tls` with `attach` is refused.
    pub(crate) fn start_or_attach(
        n: usize,
        shards: usize,
        attach: &[SocketAddr],
        tls: bool,
    ) -> Result<Target, String> {
        if !attach.is_empty() {
            if tls {
                return Err(
                    "--tls measures a cluster the benchmark starts: it cannot be \
                            combined with --attach"
                        .into(),
                );
            }
            return Ok(Target {
                servers: None,
                clients: attach.to_vec(),
                metrics: Vec::new(),
                tls: None,
            });
        }
        // Each replica serves `/metrics`, for the stage timings: its port
        // is reserved together with the replicas' own.
        let n = n * shards.max(1) + if shards > 1 { DIRECTORY } else { 0 };
        let mut clients = creek_harness::ports::reserve(3 * n)?;
        let mut peers = clients.split_off(n);
        let metrics = peers.split_off(n);
        let servers = start_on(clients, peers, shards, "cluster", "warn", tls, |c| {
            c.metrics_addr = usize::from(c.id)
                .checked_sub(1)
                .and_then(|i| metrics.get(i))
                .copied();
        })?;
        Ok(Target {
            tls: if tls {
                Some(client_tls(&servers)?)
            } else {
                None
            },
            clients: servers.clients.clone(),
            servers: Some(servers),
            metrics,
        })
    }

    /// The process ids of the servers started and running (none when
    /// attached).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.servers.as_ref().map_or_else(Vec::new, |s| {
            (0..s.clients.len()).filter_map(|i| s.pid(i)).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_setting_fails_before_any_process_starts_and_leaves_nothing() {
        let r = start(3, "procs-test", "warn", false, |c| {
            c.checkpoint_every_secs = 0
        });
        let Err(e) = r else {
            panic!("checkpoint_every_secs = 0 was accepted");
        };
        assert!(e.contains("checkpoint_every_secs"), "{e}");
        let dir =
            std::env::temp_dir().join(format!("creek-bench-procs-test-{}", std::process::id()));
        assert!(!dir.exists(), "{} was left behind", dir.display());
    }
}
