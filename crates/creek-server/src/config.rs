//! Server configuration: a TOML file, overridable by flags, validated into a
//! [`ServerConfig`] before anything starts.
//!
//! ```toml
//! id = 1
//! data_dir = "creek-data/r1"
//! metrics_addr = "127.0.0.1:9101"   # optional
//!
//! [[replicas]]
//! id = 1
//! peer_addr = "127.0.0.1:7101"
//! client_addr = "127.0.0.1:7001"
//! # … one table per replica of the group, this one included
//! ```
//!
//! This replica listens for peers on its own `peer_addr` and for clients on
//! its own `client_addr`; every other setting has a default (see
//! [`ServerConfig`]'s fields and `docs/operations.md`).
//!
//! With a `[tls]` table both links use TLS (see [`crate::tls`] and
//! `docs/security.md`):
//!
//! ```toml
//! [tls]
//! ca = "certs/ca.crt"          # the CA every replica and client trusts
//! cert = "certs/node-1.crt"    # this replica's certificate (names replica-1.creek)
//! key = "certs/node-1.key"
//! require_client_cert = true   # the default: clients present a certificate of the CA
//! ```
//!
//! With it, the HTTP port (`metrics_addr`) is served over TLS too. Without
//! it, a replica refuses to listen on any address that is not loopback,
//! the HTTP port's included, unless `insecure = true` (`creek serve
//! --insecure`).

use creek_types::planted::Bug;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use creek_core::ReplicaId;
use serde::{Deserialize, Serialize};

/// One replica of the group, as every member knows it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReplicaAddr {
    /// Its id (1..=65535, unique in the group).
    pub id: u16,
    /// Where it listens for peers.
    pub peer_addr: SocketAddr,
    /// Where it serves clients (gRPC).
    pub client_addr: SocketAddr,
}

/// TLS on the client and peer links: the files are read at start and again
/// on [`crate::Server::reload_tls`] (`creek serve` does it on SIGHUP).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the certificate authority that signed every replica's
    /// and client's certificate (one or more certificates).
    pub ca: PathBuf,
    /// PEM file of this replica's certificate (chain), which must name
    /// this replica as the DNS name `replica-<id>.creek` (what
    /// `creek certs create-node` writes).
    pub cert: PathBuf,
    /// PEM file of the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Clients must present a certificate signed by `ca` (mutual TLS);
    /// `false` lets any client that trusts `ca` connect. Peers always
    /// present theirs.
    #[serde(default = "defaults::require_client_cert")]
    pub require_client_cert: bool,
}

impl TlsConfig {
    /// The files `ca`, `cert` and `key` of a directory that `creek certs`
    /// wrote, for replica `id`.
    pub fn in_dir(dir: &Path, id: u16) -> TlsConfig {
        TlsConfig {
            ca: dir.join("ca.crt"),
            cert: dir.join(format!("node-{id}.crt")),
            key: dir.join(format!("node-{id}.key")),
            require_client_cert: true,
        }
    }
}

/// Authentication and authorization of clients (docs/security.md, "Users,
/// roles and tokens"). Every replica of a cluster must have the same
/// table.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Every client call must carry a token (`authorization: Bearer …`)
    /// and hold the rights it needs. Off by default: anyone who reaches a
    /// client port may do anything.
    #[serde(default)]
    pub enabled: bool,
    /// SHA-256 (64 hexadecimal digits) of the root token's secret: the
    /// token `creek_root_<secret>` authenticates as the user `root`, with
    /// admin on everything. The way to make the first users; it can be
    /// removed once they exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_token_sha256: Option<String>,
}

impl AuthConfig {
    fn is_off(&self) -> bool {
        *self == AuthConfig::default()
    }

    /// The root token's hash, if one is configured and well formed.
    pub fn root_hash(&self) -> Result<Option<[u8; 32]>, String> {
        let Some(hex) = &self.root_token_sha256 else {
            return Ok(None);
        };
        let bad = || {
            format!(
                "auth.root_token_sha256 must be 64 hexadecimal digits (the SHA-256 of the \
                 root token's secret, as `creek dev --secure` writes it), got {} characters",
                hex.len()
            )
        };
        crate::auth::from_hex::<32>(hex).map(Some).ok_or_else(bad)
    }
}

/// The bounds of `GET /health` and `GET /ready` (`[health]` in the
/// configuration file).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// `/health` answers 503 when the node loop has not answered it for
    /// this long (it is stuck, or too busy to serve).
    pub loop_stall_ms: u64,
    /// `/health` answers 503 when a disk write has waited this long for
    /// its fsync: the disk is behind.
    pub disk_behind_ms: u64,
    /// `/ready` answers 503 while more than this many consensus entries
    /// this replica knows committed are not applied here yet.
    pub ready_lag_entries: u64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            loop_stall_ms: 2_000,
            disk_behind_ms: 2_000,
            ready_lag_entries: 1_000,
        }
    }
}

impl HealthConfig {
    fn is_default(&self) -> bool {
        *self == HealthConfig::default()
    }
}

/// Stable-snapshot reads (`[snapshot]` in the configuration file;
/// docs/snapshot-reads.md, docs/operations.md "Stable times").
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotConfig {
    /// How often a replica reports its applied time to its group's peers,
    /// a shard's leader publishes its shard's stable time to the replicas
    /// of the other shards, and an idle leader commits a clock no-op so
    /// the times move (ms; 0: stable times off). Acted on at the protocol
    /// tick, so an interval below `tick_ms` is every tick. A directory
    /// replica keeps no stable times whatever this says. Unset: 5 on a
    /// replica of a sharded cluster, off on a cluster of one group (there a
    /// snapshot read is at the replica's applied time, and an idle
    /// cluster's clock no-ops would cost CPU for nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stable_every_ms: Option<u64>,
    /// How many revisions before the newest final one a replica serves
    /// reads at (`creek get --rev`; docs/api.md, "Versions and revisions").
    /// Unset: 10,000. 0 serves the newest only. The versions kept for them
    /// share the snapshot history's bound (64 MiB): past it they are all
    /// dropped and older revisions refused until the history grows back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revisions_kept: Option<u64>,
}

/// `[snapshot] revisions_kept`'s largest value.
pub const REVISIONS_KEPT_MAX: u64 = 100_000_000;

/// `[snapshot] stable_every_ms` on a replica of a sharded cluster when unset.
pub const STABLE_EVERY_MS_SHARDS: u64 = 5;

impl SnapshotConfig {
    fn is_default(&self) -> bool {
        *self == SnapshotConfig::default()
    }
}

/// A validated server configuration.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// This replica's id; must be one of `replicas`.
    pub id: u16,
    /// The group, this replica included.
    pub replicas: Vec<ReplicaAddr>,
    /// Where the consensus log, payloads and checkpoints live.
    pub data_dir: PathBuf,
    /// The HTTP port: the console, its API, `GET /metrics`, `/health` and
    /// `/ready`; none if unset. HTTPS with this replica's certificate when
    /// `tls` is set, plaintext HTTP (loopback unless `insecure`) when not.
    #[serde(default)]
    pub metrics_addr: Option<SocketAddr>,
    /// Host names the HTTP port (console, metrics) answers to besides
    /// loopback names and the group's configured addresses: the names
    /// users and scrapers reach it by (a request naming another host is
    /// refused, which stops DNS rebinding; docs/security.md).
    #[serde(default)]
    pub http_hosts: Vec<String>,
    /// With `[auth] enabled`, `GET /metrics` answers without a token (for
    /// scrapers that send none); the console's API always needs one.
    #[serde(default)]
    pub metrics_open: bool,
    /// Execution worker threads; 0 means one per core.
    #[serde(default)]
    pub workers: usize,
    /// Threads of the runtime that serves clients and peers (gRPC, the
    /// peer transport, the console); 0 means half the cores, at least one
    /// (see [`default_io_threads`]).
    #[serde(default)]
    pub io_threads: usize,
    /// The protocol clock: CAB elections take 10–16 ticks plus 3 per rank,
    /// heartbeats 2, gossip anti-entropy 10.
    #[serde(default = "defaults::tick_ms")]
    pub tick_ms: u64,
    /// A weak op is committed by the stabilizer at the latest this long
    /// after it arrived (paper §4.4).
    #[serde(default = "defaults::stabilize_after_ms")]
    pub stabilize_after_ms: u64,
    /// A preliminary view answers as soon as the op's own execution is
    /// valid (lowest latency, paper §6.2); `false` waits until every op
    /// before it executed (the view then equals the whole tentative order's
    /// result: fewer preliminary views that the final one corrects).
    #[serde(default = "defaults::early_preliminary_views")]
    pub early_preliminary_views: bool,
    /// How long after the last checkpoint became durable the next one is
    /// started (written in the background, a chunk at a time).
    #[serde(default = "defaults::checkpoint_every_secs")]
    pub checkpoint_every_secs: u64,
    /// A checkpoint writes the whole state again: past its interval, the
    /// next one waits until the ops logged since the last hold at least
    /// 1/N of that checkpoint's state bytes (or 100,000 ops), so a large,
    /// little-changed state is not rewritten every interval. 0: a
    /// checkpoint every interval, whatever it rewrites.
    #[serde(default = "defaults::checkpoint_rewrite_ratio")]
    pub checkpoint_rewrite_ratio: u64,
    /// Client sessions: a retry of a request is answered from the request's
    /// deduplication entry for this long; a request that reaches the
    /// committed order later than this after it was invoked, without an
    /// entry, is refused as expired; entries a client did not acknowledge
    /// are deleted after twice this (docs/operations.md, "Client
    /// sessions"). 0 keeps them forever.
    #[serde(default = "defaults::session_ttl_secs")]
    pub session_ttl_secs: u64,
    /// Client invocations are refused (RESOURCE_EXHAUSTED) while this many
    /// disk writes are handed out and not yet durable.
    #[serde(default = "defaults::pending_writes_max")]
    pub pending_writes_max: u64,
    /// Strong client invocations are refused (RESOURCE_EXHAUSTED, with a
    /// retry hint) while this many of this replica's strong ops wait for
    /// their place in the consensus order; 0: no bound.
    #[serde(default = "defaults::strong_pending_max")]
    pub strong_pending_max: usize,
    /// Weak client invocations are refused (RESOURCE_EXHAUSTED, with a
    /// retry hint) while this many of this replica's own ops wait to be
    /// committed and the group has a leader; 0: no bound. Cut off from a
    /// leader, weak ops are still taken.
    #[serde(default = "defaults::weak_pending_max")]
    pub weak_pending_max: usize,
    /// The leader compacts its consensus log past a follower this many
    /// entries behind and sends it a snapshot instead.
    #[serde(default = "defaults::compaction_lag_max")]
    pub compaction_lag_max: u64,
    /// Largest client request (procedure name and arguments), in bytes.
    /// Larger ones are refused with RESOURCE_EXHAUSTED, whether the
    /// service measures them or the gRPC decoder does (its limit is
    /// `2 × max_request_bytes + 4096`, so every request ours accepts
    /// decodes; docs/security.md, "Limits").
    #[serde(default = "defaults::max_request_bytes")]
    pub max_request_bytes: usize,
    /// Client connections open at once from one address (IP); a connection
    /// past it is closed as soon as it is accepted.
    #[serde(default = "defaults::connections_per_client_max")]
    pub connections_per_client_max: usize,
    /// Client connections open at once from all addresses.
    #[serde(default = "defaults::connections_max")]
    pub connections_max: usize,
    /// Calls (HTTP/2 streams) in progress at once on one client connection:
    /// advertised as HTTP/2's `SETTINGS_MAX_CONCURRENT_STREAMS` and
    /// enforced again by the server around its services.
    #[serde(default = "defaults::streams_per_connection_max")]
    pub streams_per_connection_max: u32,
    /// Calls a client may open and cancel on one connection before the
    /// replica accepts them, before the connection is closed with
    /// `GOAWAY`: the anti-"rapid reset" bound of HTTP/2 (h2's
    /// `max_pending_accept_reset_streams`, 20 by default). A replica
    /// resumed after a pause finds every call that timed out meanwhile
    /// in that state, so the bound must exceed what its clients send
    /// during a pause (docs/security.md, "Limits").
    #[serde(default = "defaults::pending_reset_streams_max")]
    pub pending_reset_streams_max: usize,
    /// A client connection with no call in progress and nothing received
    /// for this long is closed (ms; 0 keeps idle connections open). A
    /// client connects again on its next call (docs/security.md, "Limits").
    #[serde(default = "defaults::client_idle_timeout_ms")]
    pub client_idle_timeout_ms: u64,
    /// A native client frame must be whole this long after its first byte,
    /// and a write to a client connection must make progress within it, or
    /// the connection is closed (ms).
    #[serde(default = "defaults::client_io_timeout_ms")]
    pub client_io_timeout_ms: u64,
    /// Answers queued for one native client connection that its client has
    /// not read yet (bytes): past it, the client is reading too slowly, and
    /// the connection is closed; its calls fail as unavailable.
    #[serde(default = "defaults::client_out_bytes_max")]
    pub client_out_bytes_max: usize,
    /// Frames queued toward one peer before new ones are dropped (the
    /// protocol retransmits: raft resends, gossip repairs by anti-entropy).
    #[serde(default = "defaults::peer_queue_frames")]
    pub peer_queue_frames: usize,
    /// Inbound peer connections open at once; one past it is closed when
    /// accepted and logged (a group needs one per peer, and a reconnecting
    /// peer briefly two; docs/security.md, "The peer port").
    #[serde(default = "defaults::peer_connections_max")]
    pub peer_connections_max: usize,
    /// An inbound peer frame must be whole this long after its first byte
    /// arrived, or the connection is closed (a peer that declares a large
    /// frame and stalls holds nothing for longer). A connection may stay
    /// idle between frames.
    #[serde(default = "defaults::peer_read_timeout_ms")]
    pub peer_read_timeout_ms: u64,
    /// Bytes of recent committed changes kept for watchers to resume from
    /// (keys, values and a fixed overhead per change): a watcher asking
    /// for an older position is told the oldest one it can have
    /// (docs/operations.md, "Watching changes").
    #[serde(default = "defaults::watch_history_bytes")]
    pub watch_history_bytes: usize,
    /// Accept the `Admin.SetFaults` call (tests and benchmarks only).
    #[serde(default)]
    pub allow_fault_injection: bool,
    /// After a majority of the replicas lost their data directories:
    /// rebuild this (lost) replica from the replicas left anyway, accepting
    /// that ops only the lost replicas acknowledged are gone
    /// (docs/operations.md, "Lost a disk"). Off by default.
    #[serde(default)]
    pub rebuild_despite_data_loss: bool,
    /// TLS on the client and peer links; plaintext if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// Listen without TLS on addresses that are not loopback (anyone who
    /// can reach them can read every value and speak the replica
    /// protocol). Off by default: such a configuration is refused.
    #[serde(default)]
    pub insecure: bool,
    /// Users, roles and tokens; off if unset.
    #[serde(default, skip_serializing_if = "AuthConfig::is_off")]
    pub auth: AuthConfig,
    /// The bounds `GET /health` and `GET /ready` judge by
    /// (docs/operations.md, "Health and readiness").
    #[serde(default, skip_serializing_if = "HealthConfig::is_default")]
    pub health: HealthConfig,
    /// Stable times for snapshot reads (docs/operations.md, "Stable
    /// times").
    #[serde(default, skip_serializing_if = "SnapshotConfig::is_default")]
    pub snapshot: SnapshotConfig,
    /// The cluster's shard map (a file of `creek_shard::encode`'s bytes,
    /// as `creek dev --shards` writes it) when this replica is one of a
    /// shard of a sharded cluster: it must list this replica, with the
    /// replicas `replicas` names as its shard. Calls on keys another shard
    /// owns are refused with `WRONG_SHARD` (docs/shards.md). The replica
    /// rewrites the file with every newer map it learns from the
    /// directory, so it restarts under the newest it knew. None: a
    /// cluster of one group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_map: Option<PathBuf>,
    /// This replica is one of the directory group's (the group that holds
    /// the shard map as its state and orders its changes): `shard_map`
    /// must list it in the directory. Its group forms with the map file's
    /// map and serves the newest map to the shards' replicas and clients.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub directory: bool,
    /// A protocol bug planted on purpose, to show `creek chaos` catches it
    /// (tests only; needs a build with the `planted-bugs` feature): one of
    /// [`PLANTED_BUGS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plant_bug: Option<String>,
}

/// The bugs [`ServerConfig::plant_bug`] can plant: `deliver-on-propose`
/// (consensus delivers a strong op when it is proposed, before a majority
/// accepted it: stable views before commit), `send-before-durable`
/// (payloads and consensus messages leave before the sender's disk has
/// them), `amnesiac-voter` (a replica that lost its data votes anyway).
pub const PLANTED_BUGS: &[(&str, Bug)] = &[
    ("deliver-on-propose", Bug::StableBeforeDurable),
    ("send-before-durable", Bug::SendBeforeDurable),
    ("amnesiac-voter", Bug::AmnesiacVoter),
];

impl ServerConfig {
    /// The bug [`ServerConfig::plant_bug`] names, if it names one of
    /// [`PLANTED_BUGS`].
    pub fn planted_bug(&self) -> Option<Bug> {
        let name = self.plant_bug.as_deref()?;
        PLANTED_BUGS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, bug)| *bug)
    }
}

mod defaults {
    pub fn tick_ms() -> u64 {
        10
    }
    pub fn stabilize_after_ms() -> u64 {
        50
    }
    pub fn early_preliminary_views() -> bool {
        true
    }
    pub fn checkpoint_every_secs() -> u64 {
        30
    }
    pub fn checkpoint_rewrite_ratio() -> u64 {
        creek_node::CHECKPOINT_REWRITE_RATIO
    }
    pub fn session_ttl_secs() -> u64 {
        3600
    }
    pub fn pending_writes_max() -> u64 {
        creek_node::PENDING_WRITES_MAX
    }
    pub fn strong_pending_max() -> usize {
        creek_node::STRONG_PENDING_MAX
    }
    pub fn weak_pending_max() -> usize {
        creek_node::WEAK_PENDING_MAX
    }
    pub fn compaction_lag_max() -> u64 {
        creek_cab::COMPACTION_LAG_MAX
    }
    pub fn max_request_bytes() -> usize {
        1 << 20
    }
    pub fn connections_per_client_max() -> usize {
        256
    }
    pub fn connections_max() -> usize {
        4096
    }
    pub fn streams_per_connection_max() -> u32 {
        1024
    }
    pub fn pending_reset_streams_max() -> usize {
        1024
    }
    pub fn client_idle_timeout_ms() -> u64 {
        300_000
    }
    pub fn client_io_timeout_ms() -> u64 {
        10_000
    }
    pub fn client_out_bytes_max() -> usize {
        32 << 20
    }
    pub fn peer_queue_frames() -> usize {
        8192
    }
    pub fn peer_connections_max() -> usize {
        64
    }
    pub fn peer_read_timeout_ms() -> u64 {
        10_000
    }
    pub fn watch_history_bytes() -> usize {
        64 << 20
    }
    pub fn require_client_cert() -> bool {
        true
    }
}

/// Why a configuration is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped keys.
    #[error("parsing {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (line, column, key).
        message: String,
    },
    /// A value is out of range or the replicas disagree.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl ServerConfig {
    /// Read and validate a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    /// Parse and validate TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: ServerConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::new(),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// A configuration with every default, for replica `id` of `replicas`.
    pub fn new(id: u16, replicas: Vec<ReplicaAddr>, data_dir: PathBuf) -> Self {
        ServerConfig {
            id,
            replicas,
            data_dir,
            metrics_addr: None,
            http_hosts: Vec::new(),
            metrics_open: false,
            workers: 0,
            io_threads: 0,
            tick_ms: defaults::tick_ms(),
            stabilize_after_ms: defaults::stabilize_after_ms(),
            early_preliminary_views: defaults::early_preliminary_views(),
            checkpoint_every_secs: defaults::checkpoint_every_secs(),
            checkpoint_rewrite_ratio: defaults::checkpoint_rewrite_ratio(),
            session_ttl_secs: defaults::session_ttl_secs(),
            pending_writes_max: defaults::pending_writes_max(),
            strong_pending_max: defaults::strong_pending_max(),
            weak_pending_max: defaults::weak_pending_max(),
            compaction_lag_max: defaults::compaction_lag_max(),
            max_request_bytes: defaults::max_request_bytes(),
            connections_per_client_max: defaults::connections_per_client_max(),
            connections_max: defaults::connections_max(),
            streams_per_connection_max: defaults::streams_per_connection_max(),
            pending_reset_streams_max: defaults::pending_reset_streams_max(),
            client_idle_timeout_ms: defaults::client_idle_timeout_ms(),
            client_io_timeout_ms: defaults::client_io_timeout_ms(),
            client_out_bytes_max: defaults::client_out_bytes_max(),
            peer_queue_frames: defaults::peer_queue_frames(),
            peer_connections_max: defaults::peer_connections_max(),
            peer_read_timeout_ms: defaults::peer_read_timeout_ms(),
            watch_history_bytes: defaults::watch_history_bytes(),
            allow_fault_injection: false,
            rebuild_despite_data_loss: false,
            tls: None,
            insecure: false,
            auth: AuthConfig::default(),
            health: HealthConfig::default(),
            snapshot: SnapshotConfig::default(),
            shard_map: None,
            directory: false,
            plant_bug: None,
        }
    }

    /// A local group of `n` replicas on loopback: replica `i` (1-based)
    /// listens for clients on `client_base + i - 1` and for peers on
    /// `peer_base + i - 1`, with data under `data_root/r{i}`.
    pub fn local_group(
        n: u16,
        client_base: u16,
        peer_base: u16,
        data_root: &Path,
    ) -> Result<Vec<ServerConfig>, ConfigError> {
        let ports = |base: u16| {
            (0..n)
                .map(|i| {
                    base.checked_add(i)
                        .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
                        .ok_or_else(|| ConfigError::Invalid(format!("port {base} + {i} overflows")))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Self::group_on(&ports(peer_base)?, &ports(client_base)?, data_root)
    }

    /// One configuration per replica of a group whose replica `i` (1-based)
    /// listens for peers on `peers[i - 1]` and for clients on
    /// `clients[i - 1]`, with data under `data_root/r{i}`.
    pub fn group_on(
        peers: &[SocketAddr],
        clients: &[SocketAddr],
        data_root: &Path,
    ) -> Result<Vec<ServerConfig>, ConfigError> {
        if peers.is_empty() || peers.len() != clients.len() || peers.len() > usize::from(u16::MAX) {
            return Err(ConfigError::Invalid(
                "a group needs as many peer as client addresses, at least one".into(),
            ));
        }
        let replicas: Vec<ReplicaAddr> = (1..)
            .zip(peers.iter().zip(clients))
            .map(|(id, (&peer_addr, &client_addr))| ReplicaAddr {
                id,
                peer_addr,
                client_addr,
            })
            .collect();
        replicas
            .iter()
            .map(|r| {
                let c =
                    ServerConfig::new(r.id, replicas.clone(), data_root.join(format!("r{}", r.id)));
                c.validate()?;
                Ok(c)
            })
            .collect()
    }

    /// The configuration as a TOML file (what [`ServerConfig::from_toml`]
    /// reads back).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string(self).map_err(|e| ConfigError::Invalid(format!("writing TOML: {e}")))
    }

    /// Check every field and the group's consistency.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.replicas.is_empty() {
            return bad("`replicas` is empty: list every replica of the group".into());
        }
        let mut ids = BTreeSet::new();
        let mut addrs = BTreeSet::new();
        for r in &self.replicas {
            if r.id == 0 {
                return bad("replica id 0 is reserved; ids start at 1".into());
            }
            if !ids.insert(r.id) {
                return bad(format!("replica id {} is listed twice", r.id));
            }
            for a in [r.peer_addr, r.client_addr] {
                if !addrs.insert(a) {
                    return bad(format!("address {a} is used twice"));
                }
            }
        }
        if !ids.contains(&self.id) {
            return bad(format!(
                "id {} is not among the replicas {:?}",
                self.id, ids
            ));
        }
        if let Some(m) = self.metrics_addr {
            if addrs.contains(&m) {
                return bad(format!("metrics address {m} is also a replica address"));
            }
        }
        if self.tick_ms == 0 || self.tick_ms > 1000 {
            return bad(format!(
                "tick_ms = {} must be within 1..=1000",
                self.tick_ms
            ));
        }
        if self.checkpoint_every_secs == 0 {
            return bad("checkpoint_every_secs must be at least 1".into());
        }
        let h = &self.health;
        if !(100..=600_000).contains(&h.loop_stall_ms)
            || !(100..=600_000).contains(&h.disk_behind_ms)
        {
            return bad(format!(
                "health.loop_stall_ms = {} and health.disk_behind_ms = {} must be within 100..=600000",
                h.loop_stall_ms, h.disk_behind_ms
            ));
        }
        if let Some(ms) = self
            .snapshot
            .stable_every_ms
            .filter(|ms| *ms > STABLE_EVERY_MS_MAX)
        {
            return bad(format!(
                "snapshot.stable_every_ms = {ms} must be at most {STABLE_EVERY_MS_MAX} (0 turns \
                 stable times off)"
            ));
        }
        if let Some(n) = self
            .snapshot
            .revisions_kept
            .filter(|n| *n > REVISIONS_KEPT_MAX)
        {
            return bad(format!(
                "snapshot.revisions_kept = {n} must be at most {REVISIONS_KEPT_MAX} (0 serves \
                 the newest revision only)"
            ));
        }
        if self.session_ttl_secs > 365 * 24 * 3600 {
            return bad(format!(
                "session_ttl_secs = {} must be at most a year (0 keeps sessions forever)",
                self.session_ttl_secs
            ));
        }
        if self.pending_writes_max == 0 {
            return bad("pending_writes_max must be at least 1".into());
        }
        if self.compaction_lag_max == 0 {
            return bad("compaction_lag_max must be at least 1".into());
        }
        if self.max_request_bytes < 64 || self.max_request_bytes > 4 << 20 {
            return bad(format!(
                "max_request_bytes = {} must be within 64..=4194304",
                self.max_request_bytes
            ));
        }
        if self.connections_per_client_max == 0 || self.connections_max == 0 {
            return bad("connections_per_client_max and connections_max must be at least 1".into());
        }
        if self.connections_per_client_max > self.connections_max {
            return bad(format!(
                "connections_per_client_max = {} exceeds connections_max = {}",
                self.connections_per_client_max, self.connections_max
            ));
        }
        if self.streams_per_connection_max == 0 {
            return bad("streams_per_connection_max must be at least 1".into());
        }
        if !(20..=65_536).contains(&self.pending_reset_streams_max) {
            return bad(format!(
                "pending_reset_streams_max = {} must be within 20..=65536 (20 is HTTP/2's \
                 own default; more than 65536 gives up the rapid-reset defence)",
                self.pending_reset_streams_max
            ));
        }
        if self.client_idle_timeout_ms != 0
            && !(1_000..=86_400_000).contains(&self.client_idle_timeout_ms)
        {
            return bad(format!(
                "client_idle_timeout_ms = {} must be 0 (never) or within 1000..=86400000",
                self.client_idle_timeout_ms
            ));
        }
        if !(100..=600_000).contains(&self.client_io_timeout_ms) {
            return bad(format!(
                "client_io_timeout_ms = {} must be within 100..=600000 (a client frame must be \
                 whole, and a write to a client make progress, this long after it began)",
                self.client_io_timeout_ms
            ));
        }
        if !((64 << 10)..=(1 << 30)).contains(&self.client_out_bytes_max) {
            return bad(format!(
                "client_out_bytes_max = {} must be within 65536..=1073741824",
                self.client_out_bytes_max
            ));
        }
        if self.peer_queue_frames == 0 {
            return bad("peer_queue_frames must be at least 1".into());
        }
        // Each peer connects once, and again while a broken connection is
        // still being noticed.
        let peers_needed = 2 * self.replicas.len().saturating_sub(1);
        if self.peer_connections_max < peers_needed.max(1) {
            return bad(format!(
                "peer_connections_max = {} must be at least {} (two per peer of the {} \
                 replicas listed)",
                self.peer_connections_max,
                peers_needed.max(1),
                self.replicas.len()
            ));
        }
        if !(100..=600_000).contains(&self.peer_read_timeout_ms) {
            return bad(format!(
                "peer_read_timeout_ms = {} must be within 100..=600000 (a peer frame must be \
                 whole this long after its first byte)",
                self.peer_read_timeout_ms
            ));
        }
        if self.io_threads > IO_THREADS_MAX {
            return bad(format!(
                "io_threads = {} must be at most {IO_THREADS_MAX} (0: half the cores)",
                self.io_threads
            ));
        }
        if self.watch_history_bytes > 16 << 30 {
            return bad(format!(
                "watch_history_bytes = {} must be at most 16 GiB",
                self.watch_history_bytes
            ));
        }
        if self.data_dir.as_os_str().is_empty() {
            return bad("data_dir is empty".into());
        }
        if self.directory && self.shard_map.is_none() {
            return bad(
                "directory = true needs shard_map: the map file the directory group forms with"
                    .into(),
            );
        }
        match &self.tls {
            Some(tls) => {
                for (name, path) in [("ca", &tls.ca), ("cert", &tls.cert), ("key", &tls.key)] {
                    if path.as_os_str().is_empty() {
                        return bad(format!("tls.{name} is empty: give the path of a PEM file"));
                    }
                    if !path.is_file() {
                        return bad(format!(
                            "tls.{name} = {}: no such file (create certificates with \
                             `creek certs`, docs/security.md)",
                            path.display()
                        ));
                    }
                }
            }
            None if !self.insecure => {
                let me = self.me();
                let http = self
                    .metrics_addr
                    .map(|a| ("HTTP (console and metrics) request", a));
                let addrs = [("client", me.client_addr), ("peer", me.peer_addr)];
                for (what, addr) in addrs.into_iter().chain(http) {
                    if !addr.ip().is_loopback() {
                        return bad(format!(
                            "refusing to listen for {what}s on {addr} without TLS: anyone who \
                             can reach it could read and change every value{}. Add a [tls] \
                             section with ca, cert and key (`creek certs`, \
                             docs/security.md), or start with --insecure (insecure = true) \
                             if the network is trusted",
                            if what == "peer" {
                                " and speak the replica protocol"
                            } else {
                                ""
                            }
                        ));
                    }
                }
            }
            None => {}
        }
        if let Err(e) = self.auth.root_hash() {
            return bad(e);
        }
        if let Some(bug) = &self.plant_bug {
            if self.planted_bug().is_none() {
                let names: Vec<&str> = PLANTED_BUGS.iter().map(|(n, _)| *n).collect();
                return bad(format!(
                    "plant_bug = {bug:?} is none of {}",
                    names.join(", ")
                ));
            }
            if !creek_node::PLANTED_BUGS {
                return bad(format!(
                    "plant_bug: {}; build with `--features creek-node/planted-bugs`",
                    creek_core::PLANTED_BUGS_OFF
                ));
            }
        }
        Ok(())
    }

    /// This replica's entry.
    pub fn me(&self) -> &ReplicaAddr {
        // validate() guarantees presence; fall back to the first entry.
        self.replicas
            .iter()
            .find(|r| r.id == self.id)
            .unwrap_or(&self.replicas[0])
    }

    /// This replica's id.
    pub fn replica_id(&self) -> ReplicaId {
        ReplicaId(self.id)
    }

    /// Every replica id of the group.
    pub fn group(&self) -> Vec<ReplicaId> {
        self.replicas.iter().map(|r| ReplicaId(r.id)).collect()
    }

    /// The protocol tick.
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }

    /// Threads of the runtime that serves clients and peers.
    pub fn io_threads(&self) -> usize {
        if self.io_threads > 0 {
            self.io_threads
        } else {
            default_io_threads()
        }
    }

    /// Execution workers to start.
    pub fn worker_threads(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            cores()
        }
    }
}

/// This machine's cores (1 if it cannot tell).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Threads of a replica's runtime when the configuration leaves it open:
/// half the cores, at least one. The node loop and the persister have
/// threads of their own, and each idle runtime thread costs wake-ups: a
/// thread woken for a task wakes another to look for more work, which finds
/// none (measured in docs/bench/cluster.md, "Fewer wake-ups on an op's
/// path").
pub fn default_io_threads() -> usize {
    default_io_threads_for(cores())
}

fn default_io_threads_for(cores: usize) -> usize {
    (cores / 2).max(1)
}

/// The longest stable-time interval: past it, a snapshot read's staleness
/// would be counted in minutes.
const STABLE_EVERY_MS_MAX: u64 = 60_000;

/// The most runtime threads a configuration may ask for.
const IO_THREADS_MAX: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_gets_half_the_cores_at_least_one() {
        assert_eq!(default_io_threads_for(1), 1);
        assert_eq!(default_io_threads_for(2), 1);
        assert_eq!(default_io_threads_for(8), 4);
        let mut c = ServerConfig::new(1, Vec::new(), "/tmp/x".into());
        c.io_threads = 3;
        assert_eq!(c.io_threads(), 3);
    }

    const GOOD: &str = r#"
        id = 2
        data_dir = "/tmp/x"
        [[replicas]]
        id = 1
        peer_addr = "127.0.0.1:7101"
        client_addr = "127.0.0.1:7001"
        [[replicas]]
        id = 2
        peer_addr = "127.0.0.1:7102"
        client_addr = "127.0.0.1:7002"
    "#;

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = ServerConfig::from_toml(GOOD).expect("valid");
        assert_eq!(c.id, 2);
        assert_eq!(c.tick_ms, 10);
        assert_eq!(c.me().client_addr.port(), 7002);
        assert!(!c.allow_fault_injection);
        assert!(c.early_preliminary_views);
        assert_eq!(c.snapshot.stable_every_ms, None);
        let strict = format!("early_preliminary_views = false\n{GOOD}");
        let c = ServerConfig::from_toml(&strict).expect("valid");
        assert!(!c.early_preliminary_views);
    }

    #[test]
    fn errors_name_the_problem() {
        let unknown = format!("{GOOD}\nbogus = 1");
        let e = ServerConfig::from_toml(&unknown).expect_err("unknown key");
        assert!(e.to_string().contains("bogus"), "{e}");
        let wrong_id = GOOD.replace("id = 2\n        data_dir", "id = 9\n        data_dir");
        let e = ServerConfig::from_toml(&wrong_id).expect_err("id not listed");
        assert!(e.to_string().contains("id 9 is not among"), "{e}");
        let dup = GOOD.replace("7102", "7101");
        let e = ServerConfig::from_toml(&dup).expect_err("duplicate address");
        assert!(e.to_string().contains("used twice"), "{e}");
        let tick = format!("tick_ms = 0\n{GOOD}");
        let e = ServerConfig::from_toml(&tick).expect_err("tick 0");
        assert!(e.to_string().contains("tick_ms"), "{e}");
        let stable = format!("{GOOD}\n[snapshot]\nstable_every_ms = 600000");
        let e = ServerConfig::from_toml(&stable).expect_err("too long an interval");
        assert!(e.to_string().contains("snapshot.stable_every_ms"), "{e}");
        let off = format!("{GOOD}\n[snapshot]\nstable_every_ms = 0");
        let c = ServerConfig::from_toml(&off).expect("off is valid");
        assert_eq!(c.snapshot.stable_every_ms, Some(0));
    }

    #[test]
    fn a_configuration_survives_writing_and_reading() {
        let mut g = ServerConfig::local_group(3, 7001, 7101, Path::new("/tmp/d")).expect("group");
        g[1].metrics_addr = Some("127.0.0.1:9102".parse().expect("addr"));
        g[1].allow_fault_injection = true;
        g[1].snapshot.stable_every_ms = Some(20);
        let text = g[1].to_toml().expect("toml");
        assert_eq!(ServerConfig::from_toml(&text).expect("parses"), g[1]);
    }

    #[test]
    fn plaintext_off_loopback_is_refused_unless_insecure() {
        let open = GOOD.replace(
            "client_addr = \"127.0.0.1:7002\"",
            "client_addr = \"0.0.0.0:7002\"",
        );
        let e = ServerConfig::from_toml(&open).expect_err("plaintext on 0.0.0.0");
        let m = e.to_string();
        assert!(
            m.contains("0.0.0.0:7002") && m.contains("without TLS"),
            "{m}"
        );
        assert!(m.contains("[tls]") && m.contains("--insecure"), "{m}");
        let peer = GOOD.replace(
            "peer_addr = \"127.0.0.1:7102\"",
            "peer_addr = \"10.0.0.2:7102\"",
        );
        let e = ServerConfig::from_toml(&peer).expect_err("plaintext peer link");
        assert!(e.to_string().contains("for peers on 10.0.0.2:7102"), "{e}");
        // Another replica's address is its own business.
        let other = GOOD.replace(
            "client_addr = \"127.0.0.1:7001\"",
            "client_addr = \"10.0.0.1:7001\"",
        );
        ServerConfig::from_toml(&other).expect("only this replica's addresses count");
        // The HTTP port (console and metrics) too.
        let http = format!("metrics_addr = \"0.0.0.0:9101\"\n{GOOD}");
        let e = ServerConfig::from_toml(&http).expect_err("plaintext console");
        assert!(
            e.to_string()
                .contains("HTTP (console and metrics) requests on 0.0.0.0:9101 without TLS"),
            "{e}"
        );
        let insecure = format!("insecure = true\n{open}");
        assert!(
            ServerConfig::from_toml(&insecure)
                .expect("insecure")
                .insecure
        );
    }

    /// With TLS the HTTP port is served over it too, so it may leave
    /// loopback without --insecure (docs/security.md, "Safe defaults").
    #[test]
    fn the_http_port_may_leave_loopback_with_tls() {
        let dir = std::env::temp_dir().join(format!("creek-http-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for f in ["ca.crt", "n.crt", "n.key"] {
            std::fs::write(dir.join(f), "").expect("a file");
        }
        let d = dir.display();
        let http = format!(
            "metrics_addr = \"0.0.0.0:9101\"\n{GOOD}\n[tls]\nca = \"{d}/ca.crt\"\ncert = \"{d}/n.crt\"\nkey = \"{d}/n.key\"\n"
        );
        let c = ServerConfig::from_toml(&http);
        let _ = std::fs::remove_dir_all(&dir);
        let c = c.expect("an HTTPS port off loopback");
        assert!(c.tls.is_some() && !c.insecure);
    }

    #[test]
    fn tls_files_must_exist() {
        let tls = format!(
            "{GOOD}\n[tls]\nca = \"/nonexistent/ca.crt\"\ncert = \"/nonexistent/n.crt\"\nkey = \"/nonexistent/n.key\"\n"
        );
        let e = ServerConfig::from_toml(&tls).expect_err("missing files");
        assert!(
            e.to_string()
                .contains("tls.ca = /nonexistent/ca.crt: no such file"),
            "{e}"
        );
        let c: ServerConfig = toml::from_str(&tls).expect("parses");
        assert!(c.tls.as_ref().is_some_and(|t| t.require_client_cert));
    }

    #[test]
    fn local_groups_are_valid_and_distinct() {
        let g = ServerConfig::local_group(3, 7001, 7101, Path::new("/tmp/d")).expect("group");
        assert_eq!(g.len(), 3);
        assert_eq!(g[2].me().client_addr.port(), 7003);
        assert_eq!(g[1].data_dir, Path::new("/tmp/d/r2"));
    }
}
