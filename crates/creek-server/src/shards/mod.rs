//! A replica of a sharded cluster: the shard map it serves under, the
//! check every client call meets before it is accepted — a call on keys
//! another shard owns is refused with `WRONG_SHARD` and changes nothing —
//! and the newer maps it learns from the directory (docs/shards.md).
//!
//! A replica is either one of a shard's or one of the directory group's.
//! A shard's replica starts from its map file (the map it last knew) and
//! asks the directory for newer maps ([`follow_directory`]); a directory
//! replica serves the map its group's committed state holds (the node
//! loop hands it over, `node_loop::directory`).

// tonic's handlers return `Status` by value.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use creek_procs::lang::KeyParam;
use creek_procs::mpo::{MpoCall, MpoId, Part};
use creek_procs::{Registry, Route};
use creek_shard::{KeyRef, RouteError, ShardId, ShardMap};
use creek_types::value::{decode_args, Value};
use creek_types::ProcCall;
use tonic::Status;

use crate::config::{ConfigError, ServerConfig};

/// The first word of a refusal's message for a call on keys this
/// replica's shard does not own; the message goes on with the map's
/// epoch as `(map epoch N)` and the owning shard as `shard S owns`.
pub const WRONG_SHARD: &str = "WRONG_SHARD";

/// What a replica serves in a sharded cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The keys of one shard.
    Shard(ShardId),
    /// The directory: the map itself, as its group's state.
    Directory,
}

impl std::fmt::Display for Role {
    /// The group's name: `shard 1`, `directory`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Shard(s) => write!(f, "shard {}", s.0),
            Role::Directory => f.write_str("directory"),
        }
    }
}

/// A map and its bytes.
#[derive(Debug)]
struct Held {
    map: ShardMap,
    encoded: Bytes,
}

/// What a replica of a sharded cluster checks calls against.
#[derive(Debug)]
pub struct ShardGate {
    held: RwLock<Arc<Held>>,
    /// The map the file held at start (what a directory forms its group
    /// with when its state holds none yet).
    seed: Bytes,
    role: Role,
    me: u16,
    /// The map file, rewritten with every newer map learnt, so a restart
    /// starts from the newest map this replica knew.
    path: PathBuf,
    registry: Arc<Registry>,
}

impl ShardGate {
    /// The gate of `config`'s replica, if it names a shard map: the map
    /// must decode and list this replica — in a shard, or in the directory
    /// when the configuration says `directory = true` — and no replica the
    /// configuration names in another group.
    pub fn load(
        config: &ServerConfig,
        registry: Arc<Registry>,
    ) -> Result<Option<Arc<ShardGate>>, ConfigError> {
        let Some(path) = &config.shard_map else {
            return Ok(None);
        };
        let encoded = read(path)?;
        let map = creek_shard::decode(&encoded)
            .map_err(|e| ConfigError::Invalid(format!("shard map {}: {e}", path.display())))?;
        let me = config.id;
        let (role, listed) = if config.directory {
            if !map.is_directory_replica(me) {
                return Err(ConfigError::Invalid(format!(
                    "replica {me} is configured as a directory replica, but the shard map {} \
                     (cluster {:016x}, epoch {}) does not list it in the directory",
                    path.display(),
                    map.cluster,
                    map.epoch
                )));
            }
            (Role::Directory, &map.directory)
        } else {
            let shard = map.shard_of_replica(me).ok_or_else(|| {
                let hint = if map.is_directory_replica(me) {
                    "it is a directory replica: configure it with directory = true"
                } else {
                    "configure it into a shard the map lists"
                };
                ConfigError::Invalid(format!(
                    "replica {me} is not in the shard map {} (cluster {:016x}, epoch {}): {hint}",
                    path.display(),
                    map.cluster,
                    map.epoch
                ))
            })?;
            (Role::Shard(shard), &map.shards[&shard])
        };
        // The configuration lists the group a replica was formed or
        // joined with; the group changes online after that, so a replica
        // may be gone from the map. One the map places in another group is
        // a configuration of the wrong shard.
        let elsewhere: Vec<u16> = config
            .replicas
            .iter()
            .map(|r| r.id)
            .filter(|id| {
                !listed.replicas.contains_key(id)
                    && (map.shard_of_replica(*id).is_some() || map.is_directory_replica(*id))
            })
            .collect();
        if !elsewhere.is_empty() {
            let ids: Vec<u16> = listed.replicas.keys().copied().collect();
            return Err(ConfigError::Invalid(format!(
                "the shard map {} lists replicas {ids:?} in {role}; this configuration \
                 also names {elsewhere:?}, which the map places in another group",
                path.display(),
            )));
        }
        Ok(Some(Arc::new(ShardGate {
            held: RwLock::new(Arc::new(Held {
                map,
                encoded: encoded.clone(),
            })),
            seed: encoded,
            role,
            me,
            path: path.clone(),
            registry,
        })))
    }

    fn held(&self) -> Arc<Held> {
        self.held
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The map's bytes ([`creek_shard::encode`]).
    pub fn encoded(&self) -> Bytes {
        self.held().encoded.clone()
    }

    /// The epoch of the map this replica serves under.
    pub fn epoch(&self) -> u64 {
        self.held().map.epoch
    }

    /// The map this replica serves under.
    pub fn map(&self) -> ShardMap {
        self.held().map.clone()
    }

    /// The map the file held at start.
    pub fn seed(&self) -> &Bytes {
        &self.seed
    }

    /// What this replica serves.
    pub fn role(&self) -> Role {
        self.role
    }

    /// This replica's shard (shard 0 for a directory replica, which
    /// serves no keys).
    pub fn shard(&self) -> ShardId {
        match self.role {
            Role::Shard(s) => s,
            Role::Directory => ShardId(0),
        }
    }

    /// Serve under `encoded` from now on if it is a newer map of this
    /// cluster that still places this replica where it is; the map file is
    /// rewritten with it. `Ok(Some(epoch))`: adopted; `Ok(None)`: not newer;
    /// `Err`: refused (the reason, for the log), and nothing changes.
    pub fn adopt(&self, encoded: &Bytes) -> Result<Option<u64>, String> {
        let map = creek_shard::decode(encoded).map_err(|e| e.to_string())?;
        let mut held = self
            .held
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match held.map.superseded_by(&map) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => {
                return Err(format!(
                    "a shard map at epoch {} is refused (this replica serves under epoch {}): {e}",
                    map.epoch, held.map.epoch
                ))
            }
        }
        let placed = match self.role {
            Role::Shard(s) => map.shard_of_replica(self.me) == Some(s),
            Role::Directory => map.is_directory_replica(self.me),
        };
        if !placed {
            return Err(format!(
                "the shard map at epoch {} does not list replica {} where it serves ({}): \
                 kept the map at epoch {}",
                map.epoch, self.me, self.role, held.map.epoch
            ));
        }
        let epoch = map.epoch;
        *held = Arc::new(Held {
            map,
            encoded: encoded.clone(),
        });
        drop(held);
        if let Err(e) = save(&self.path, encoded) {
            tracing::warn!(
                path = %self.path.display(),
                error = %e,
                epoch,
                "could not save the newer shard map; serving under it, a restart starts from \
                 the older one"
            );
        }
        Ok(Some(epoch))
    }

    /// The shard owning `call`'s key and its replicas' ids and client addresses,
    /// when that is another shard than this replica's (what the console
    /// forwards a call to); `None` when this replica may take it.
    pub fn owner_elsewhere(&self, call: &ProcCall) -> Option<(ShardId, Vec<(u16, String)>)> {
        let Role::Shard(shard) = self.role else {
            return None;
        };
        let held = self.held();
        let (_, Ok(owner)) = keys_owner(&held.map, self.registry.route_of(&call.name), call)?
        else {
            return None;
        };
        if owner == shard {
            return None;
        }
        let replicas = held.map.shards.get(&owner)?.replicas.iter();
        Some((
            owner,
            replicas.map(|(id, e)| (*id, e.client.clone())).collect(),
        ))
    }

    /// Every group of the map — each shard by name (`shard 1`) and the
    /// directory — with its replicas' ids and client addresses; with the
    /// name of this replica's own and the map's epoch.
    pub fn groups(&self) -> Groups {
        let held = self.held();
        let map = &held.map;
        let list = |s: &creek_shard::Shard| {
            s.replicas
                .iter()
                .map(|(id, e)| (*id, e.client.clone()))
                .collect::<Vec<_>>()
        };
        let mut groups: Vec<(String, Vec<(u16, String)>)> = map
            .shards
            .iter()
            .map(|(id, s)| (Role::Shard(*id).to_string(), list(s)))
            .collect();
        if !map.directory.replicas.is_empty() {
            groups.push((Role::Directory.to_string(), list(&map.directory)));
        }
        Groups {
            own: self.role.to_string(),
            epoch: map.epoch,
            groups,
        }
    }

    /// Accept `call` if this shard may run it: its key is this shard's,
    /// or it is state every shard keeps. On a cluster of one shard, and on
    /// a directory replica, every call is accepted. A name no built-in has
    /// is a user procedure's: the node loop checks it against the keys it
    /// declares ([`ShardGate::check_user`]).
    ///
    /// A `strong` call whose keys span shards, one of them this
    /// replica's, is an operation across shards: `Ok(Some(mpo))`, the
    /// call this replica runs as its origin (docs/cross-shard.md). A weak
    /// one is refused: a weak answer comes from one replica's tentative
    /// state, which holds one shard's keys.
    pub fn check(&self, call: &ProcCall, strong: bool) -> Result<Option<MpoCall>, Status> {
        let Some((shard, held)) = self.several_shards() else {
            return Ok(None);
        };
        if self.registry.get(&call.name).is_none() {
            return Ok(None);
        }
        let route = self.registry.route_of(&call.name);
        if route == Route::Everywhere {
            return Ok(None);
        }
        if route == Route::Unknown && call.name.starts_with("lease.") {
            return Err(Status::failed_precondition(format!(
                "{}: a lease lives in one shard's group, and a cluster of {} shards does not \
                 route lease calls; kv.put_ttl gives a key a lease of its own on its shard",
                call.name,
                held.map.shards.len()
            )));
        }
        if route == Route::Txn {
            let shards = held.map.shards.len();
            let refused = |why: &str| {
                Err(Status::failed_precondition(format!(
                    "{}: {why}, so a cluster of {shards} shards cannot route it",
                    call.name
                )))
            };
            match creek_shard::txn_keys(&decode_args(&call.args).unwrap_or_default()) {
                creek_shard::TxnKeys::Range => {
                    return refused("a range op reads keys of every shard")
                }
                creek_shard::TxnKeys::Lease => {
                    return refused("a put with a lease needs its lease's group")
                }
                // Its own check refuses it; no keys: it touches none.
                creek_shard::TxnKeys::Malformed => return Ok(None),
                creek_shard::TxnKeys::Keys(keys) if keys.is_empty() => return Ok(None),
                creek_shard::TxnKeys::Keys(_) => {}
            }
        }
        if route == Route::Unknown {
            return Err(Status::failed_precondition(format!(
                "{}: its keys are known only as it runs, so a cluster of {} shards cannot \
                 route it",
                call.name,
                held.map.shards.len()
            )));
        }
        // Malformed arguments are refused by the registry's check.
        let Some((keys, owner)) = keys_owner(&held.map, route, call) else {
            return Ok(None);
        };
        if let Err(RouteError::Spans { shards }) = &owner {
            let args = || decode_args(&call.args).unwrap_or_default();
            if route == Route::Txn && creek_shard::txn_compares_records(&args()) {
                return Err(Status::failed_precondition(format!(
                    "{}: a version, revision or lease compare reads its key's own shard's \
                     records, so a transaction comparing them cannot span {} shards",
                    call.name,
                    shards.len()
                )));
            }
            let keys: Vec<(Option<&str>, Bytes)> = keys.iter().map(|k| (None, k.clone())).collect();
            return across(call, strong, &keys, shards, shard, &held.map).map(Some);
        }
        let what = match keys.as_slice() {
            [key] => format!("key {}", Value::Bytes(key.clone())),
            _ => format!("its {} keys", keys.len()),
        };
        judge(&call.name, &what, owner, shard, &held.map).map(|()| None)
    }

    /// The cluster's id.
    pub fn cluster(&self) -> u64 {
        self.held().map.cluster
    }

    /// The replicas of shard `shard` (the directory's with `None`): ids
    /// and client addresses, by id.
    pub fn endpoints(&self, shard: Option<u32>) -> Vec<(u16, String)> {
        let held = self.held();
        let group = match shard {
            None => Some(&held.map.directory),
            Some(s) => u16::try_from(s)
                .ok()
                .and_then(|s| held.map.shards.get(&ShardId(s))),
        };
        group
            .map(|g| {
                g.replicas
                    .iter()
                    .map(|(id, e)| (*id, e.client.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The ids of every replica of the cluster (the shards' and the
    /// directory's).
    pub fn replica_ids(&self) -> Vec<u16> {
        let held = self.held();
        let map = &held.map;
        map.shards
            .values()
            .chain(std::iter::once(&map.directory))
            .flat_map(|g| g.replicas.keys().copied())
            .collect()
    }

    /// Accept a call of a user procedure if this shard owns every key it
    /// declares (`declared`, by parameter; a prefix by its keyspace's
    /// placement, [`creek_shard::KeyRef`]), or, for a `strong` call whose
    /// declared keys (not prefixes) span shards including this one, as an
    /// operation across shards: the call its origin runs, as for
    /// [`ShardGate::check`]. A user procedure that declares no keys is
    /// refused on a cluster of several shards. Malformed arguments pass:
    /// the replica's check refuses them.
    pub fn check_user(
        &self,
        call: &ProcCall,
        strong: bool,
        declared: &[(usize, KeyParam)],
    ) -> Result<Option<MpoCall>, Status> {
        let (name, args) = (&call.name, &call.args);
        let Some((shard, held)) = self.several_shards() else {
            return Ok(None);
        };
        if declared.is_empty() {
            return Err(Status::failed_precondition(format!(
                "{name}: it declares no key parameters, so a cluster of {} shards cannot \
                 route it: declare them in its signature (key(KEYSPACE), prefix(KEYSPACE); \
                 docs/procedures.md, \"Declared keys\")",
                held.map.shards.len()
            )));
        }
        let Ok(args) = decode_args(args) else {
            return Ok(None);
        };
        let mut shown = Vec::new();
        let mut keys = Vec::new();
        for (at, param) in declared {
            let Some(arg) = args.get(*at).and_then(Value::as_bytes) else {
                return Ok(None);
            };
            let (what, key) = match param.prefix {
                true => ("keys starting with", KeyRef::Prefix(&arg[..])),
                false => ("key", KeyRef::Key(&arg[..])),
            };
            shown.push(format!(
                "{what} {} of keyspace {}",
                Value::Bytes(arg.clone()),
                param.keyspace
            ));
            keys.push((Some(param.keyspace.as_str()), key));
        }
        let owner = held.map.route_declared(keys);
        if let Err(RouteError::Spans { shards }) = &owner {
            if declared.iter().any(|(_, p)| p.prefix) {
                return Err(Status::failed_precondition(format!(
                    "{name}: its declared keys span shards, and it declares a prefix: an \
                     operation across shards names each of its keys (key(KEYSPACE) \
                     parameters; docs/procedures.md, \"Across shards\")"
                )));
            }
            let keys: Vec<(Option<&str>, Bytes)> = declared
                .iter()
                .filter_map(|(at, p)| {
                    Some((
                        Some(p.keyspace.as_str()),
                        args.get(*at)?.as_bytes()?.clone(),
                    ))
                })
                .collect();
            return across(call, strong, &keys, shards, shard, &held.map).map(Some);
        }
        let what = match shown.as_slice() {
            [one] => one.clone(),
            _ => format!("its {} declared keys", shown.len()),
        };
        judge(name, &what, owner, shard, &held.map).map(|()| None)
    }

    /// Whether calls may be refused here: a shard's replica of a cluster
    /// of several shards (elsewhere every call passes, so the node loop
    /// need not look a user procedure up).
    pub fn routes_calls(&self) -> bool {
        self.several_shards().is_some()
    }

    /// This replica's shard and map, when it serves a shard of a cluster
    /// of several (the only case a call may be refused).
    fn several_shards(&self) -> Option<(ShardId, Arc<Held>)> {
        let Role::Shard(shard) = self.role else {
            return None;
        };
        let held = self.held();
        (held.map.shards.len() > 1).then_some((shard, held))
    }
}

/// Accept an operation on `what` (its keys, as a message names them) of
/// procedure `name` if `owner` is `shard`: `WRONG_SHARD` naming the owner,
/// or a refusal naming the shards the keys span.
fn judge(
    name: &str,
    what: &str,
    owner: Result<ShardId, RouteError>,
    shard: ShardId,
    map: &ShardMap,
) -> Result<(), Status> {
    match owner {
        Ok(owner) if owner == shard => Ok(()),
        Ok(owner) => Err(Status::failed_precondition(format!(
            "{WRONG_SHARD}: {name} on {what} goes to another shard: shard {} owns it (map \
             epoch {}); this replica serves shard {}",
            owner.0, map.epoch, shard.0
        ))),
        Err(RouteError::Spans { shards }) => {
            let names: Vec<String> = shards.iter().map(|s| s.0.to_string()).collect();
            Err(Status::failed_precondition(format!(
                "{name}: its keys span shards {} (map epoch {}); a user procedure across shards \
                 is not served by a cluster of processes yet: keep the keys on one shard (a hash \
                 tag {{…}} or a keyspace placement, docs/shards.md)",
                names.join(", "),
                map.epoch
            )))
        }
        // No key (an empty list): it reads and writes nothing.
        Err(_) => Ok(()),
    }
}

/// A strong call of `name` on `keys`, which span `shards`, as an
/// operation across shards with this replica's shard `me` as its origin;
/// refused if it is weak or `me` is not among its shards.
/// A `strong` call whose `keys` (each with its keyspace, `None` for the
/// default one) span `shards` as an operation across shards with this
/// replica (of shard `me`) its origin: the call it runs. Refused when
/// weak, on a map without a directory, or when `me` owns none of them.
fn across(
    call: &ProcCall,
    strong: bool,
    keys: &[(Option<&str>, Bytes)],
    shards: &[ShardId],
    me: ShardId,
    map: &ShardMap,
) -> Result<MpoCall, Status> {
    let names: Vec<String> = shards.iter().map(|s| s.0.to_string()).collect();
    let spans = format!(
        "{}: its keys span shards {} (map epoch {})",
        call.name,
        names.join(", "),
        map.epoch
    );
    if !strong {
        return Err(Status::failed_precondition(format!(
            "{spans}: a weak operation never spans shards (its answer comes from one \
             replica's tentative state, which holds one shard's keys); invoke it strong, or \
             keep its keys on one shard (a hash tag {{…}}, docs/shards.md)"
        )));
    }
    if map.directory.replicas.is_empty() {
        return Err(Status::failed_precondition(format!(
            "{spans}: an operation across shards is sequenced by the directory group, and this \
             cluster's map lists none (docs/shards.md, \"The directory\")"
        )));
    }
    let first = keys.first().map_or(me, |(ks, k)| map.owner(*ks, k));
    if !shards.contains(&me) {
        return Err(Status::failed_precondition(format!(
            "{WRONG_SHARD}: {spans}: shard {} owns its first key (map epoch {}), and this \
             replica serves shard {}",
            first.0, map.epoch, me.0
        )));
    }
    let mut parts: std::collections::BTreeMap<u32, Vec<Bytes>> = Default::default();
    for (keyspace, key) in keys {
        let owner = map.owner(*keyspace, key);
        // A keyspace's key is stored under its keyspace's prefix.
        let stored = keyspace.map_or_else(
            || key.clone(),
            |ks| creek_procs::keyspace::data_key(ks, key),
        );
        parts.entry(u32::from(owner.0)).or_default().push(stored);
    }
    let parts = parts
        .into_iter()
        .map(|(shard, keys)| Part::new(shard, keys))
        .collect();
    MpoCall::new(
        MpoId::UNSET,
        u32::from(me.0),
        parts,
        &call.name,
        call.args.clone(),
    )
    .map_err(|e| Status::invalid_argument(format!("{spans}: {e}")))
}

/// The groups of a map as [`ShardGate::groups`] lists them.
#[derive(Debug)]
pub struct Groups {
    /// The group this replica belongs to.
    pub own: String,
    /// The map's epoch.
    pub epoch: u64,
    /// Each group's name and replicas (id, client address).
    pub groups: Vec<(String, Vec<(u16, String)>)>,
}

/// Write `bytes` to `path` whole or not at all (a temporary file of this
/// process renamed over it: replicas sharing one map file never write
/// into each other's).
fn save(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// How often a shard's replica asks the directory for its map.
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);
/// Longest wait for one directory replica's answer.
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(2);

/// Ask the directory for its map every [`FOLLOW_INTERVAL`], one directory
/// replica after another, and serve under every newer one. While no
/// directory replica answers, the replica keeps serving under the map it
/// has (single-shard operations keep working); it logs when it loses and
/// regains the directory. `tls`: the replica's own TLS files, when the
/// cluster uses TLS (its certificate is a client certificate too).
pub async fn follow_directory(gate: Arc<ShardGate>, tls: Option<crate::config::TlsConfig>) {
    let mut next = 0usize;
    let mut reachable = true;
    // One channel per directory replica, kept across asks (it reconnects
    // by itself after a failure).
    let mut channels: std::collections::HashMap<String, tonic::transport::Channel> =
        std::collections::HashMap::new();
    loop {
        tokio::time::sleep(FOLLOW_INTERVAL).await;
        let endpoints: Vec<(u16, String)> = gate
            .held()
            .map
            .directory
            .replicas
            .iter()
            .map(|(id, e)| (*id, e.client.clone()))
            .collect();
        if endpoints.is_empty() {
            continue;
        }
        let mut answered = None;
        for k in 0..endpoints.len() {
            let (id, addr) = &endpoints[(next + k) % endpoints.len()];
            let channel = match channels.get(addr) {
                Some(c) => c.clone(),
                None => match channel(*id, addr, tls.as_ref()) {
                    Ok(c) => channels.entry(addr.clone()).or_insert(c).clone(),
                    Err(e) => {
                        tracing::warn!(directory = id, %addr, error = %e, "cannot reach the directory replica");
                        continue;
                    }
                },
            };
            match ask(*id, addr, channel).await {
                Ok(map) => {
                    answered = Some(map);
                    next = (next + k) % endpoints.len();
                    break;
                }
                Err(e) => {
                    tracing::debug!(directory = id, %addr, error = %e, "directory replica did not answer")
                }
            }
        }
        let Some(encoded) = answered else {
            if reachable {
                tracing::warn!(
                    epoch = gate.held().map.epoch,
                    "no directory replica answers: serving under the map this replica has"
                );
            }
            reachable = false;
            next += 1;
            continue;
        };
        if !reachable {
            tracing::info!("the directory answers again");
        }
        reachable = true;
        if encoded.is_empty() {
            continue;
        }
        match gate.adopt(&encoded) {
            Ok(Some(epoch)) => tracing::info!(epoch, "serving under a newer shard map"),
            Ok(None) => {}
            Err(why) => tracing::error!("{why}"),
        }
    }
}

/// A channel to replica `id` at `addr` (the directory's, another shard's),
/// connected on first use; over TLS with this replica's own certificate
/// when the cluster uses TLS.
pub(crate) fn channel(
    id: u16,
    addr: &str,
    tls: Option<&crate::config::TlsConfig>,
) -> Result<tonic::transport::Channel, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(FOLLOW_TIMEOUT)
        .timeout(FOLLOW_TIMEOUT);
    if let Some(t) = tls {
        let pem = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(pem(&t.ca)?))
            .identity(tonic::transport::Identity::from_pem(
                pem(&t.cert)?,
                pem(&t.key)?,
            ))
            .domain_name(format!("replica-{id}.creek"));
        endpoint = endpoint.tls_config(config).map_err(|e| e.to_string())?;
    }
    Ok(endpoint.connect_lazy())
}

/// The map directory replica `id` at `addr` serves, asked over `channel`.
async fn ask(id: u16, addr: &str, channel: tonic::transport::Channel) -> Result<Bytes, String> {
    let reply = creek_proto::pb::creek_client::CreekClient::new(channel)
        .status(creek_proto::pb::StatusRequest::default())
        .await
        .map_err(|e| e.message().to_owned())?
        .into_inner();
    if !reply.directory {
        return Err(format!("replica {id} at {addr} is not a directory replica"));
    }
    Ok(reply.shard_map)
}

fn read(path: &Path) -> Result<Bytes, ConfigError> {
    std::fs::read(path)
        .map(Bytes::from)
        .map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })
}

/// The keys `call` names by `route` (if its arguments hold them where the
/// route says) and the shard owning them all under `map`, or why none does.
fn keys_owner(
    map: &ShardMap,
    route: Route,
    call: &ProcCall,
) -> Option<(Vec<Bytes>, Result<ShardId, RouteError>)> {
    let keys = route.keys(&decode_args(&call.args).ok()?)?;
    let owner = map.route(keys.iter().map(|k| (None, &k[..])));
    Some((keys, owner))
}

/// Configurations of a sharded cluster on loopback (`creek dev
/// --shards`): `shards` groups of `replicas` replicas, then the directory
/// group of `directory` replicas, replica ids counting up across them
/// (shard `s` holds `s * replicas + 1 ..`, the directory the ids after the
/// last shard's), replica `i` listening for clients on `client_base + i -
/// 1` and for peers on `peer_base + i - 1`, with its data under
/// `data_root/r{i}` and its copy of the map in `r{i}/shard-map.bin`.
/// Returns them with the map (keys hashed evenly over the shards) for
/// `cluster`; [`write_map_files`] gives each replica its copy.
pub fn local_shards(
    shards: u16,
    replicas: u16,
    directory: u16,
    client_base: u16,
    peer_base: u16,
    data_root: &Path,
    cluster: u64,
) -> Result<(Vec<ServerConfig>, ShardMap), ConfigError> {
    let n = shards
        .checked_mul(replicas)
        .and_then(|n| n.checked_add(directory))
        .filter(|_| shards > 0 && replicas > 0)
        .ok_or_else(|| ConfigError::Invalid("a cluster needs a shard of one replica".into()))?;
    let port = |base: u16, i: u16| {
        base.checked_add(i)
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
            .ok_or_else(|| ConfigError::Invalid(format!("port {base} + {i} overflows")))
    };
    let group_of = |first: u16, size: u16| {
        (first..first + size)
            .map(|i| {
                Ok(crate::config::ReplicaAddr {
                    id: i + 1,
                    client_addr: port(client_base, i)?,
                    peer_addr: port(peer_base, i)?,
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()
    };
    let listing = |group: &[crate::config::ReplicaAddr]| creek_shard::Shard {
        replicas: group
            .iter()
            .map(|r| {
                let e = creek_shard::Endpoint {
                    client: r.client_addr.to_string(),
                    peer: r.peer_addr.to_string(),
                };
                (r.id, e)
            })
            .collect(),
    };
    let ids: Vec<ShardId> = (0..shards).map(ShardId).collect();
    let mut map = ShardMap::hashed(cluster, &ids);
    let mut groups = Vec::new();
    for s in 0..shards {
        let group = group_of(s * replicas, replicas)?;
        map.shards.insert(ShardId(s), listing(&group));
        groups.push((group, false));
    }
    if directory > 0 {
        let group = group_of(shards * replicas, directory)?;
        map.directory = listing(&group);
        groups.push((group, true));
    }
    let mut configs = Vec::with_capacity(usize::from(n));
    for (group, is_directory) in groups {
        for r in &group {
            let dir = data_root.join(format!("r{}", r.id));
            let mut c = ServerConfig::new(r.id, group.clone(), dir.clone());
            c.shard_map = Some(dir.join("shard-map.bin"));
            c.directory = is_directory;
            c.validate()?;
            configs.push(c);
        }
    }
    map.validate()
        .map_err(|e| ConfigError::Invalid(format!("the shard map: {e}")))?;
    Ok((configs, map))
}

/// Give each of `configs` that has none yet its copy of `map` (a replica
/// that has one keeps it: it is the newest map that replica knew).
pub fn write_map_files(configs: &[ServerConfig], map: &ShardMap) -> Result<(), ConfigError> {
    let bytes = creek_shard::encode(map);
    for path in configs.iter().filter_map(|c| c.shard_map.as_ref()) {
        if path.exists() {
            continue;
        }
        let io = |source| ConfigError::Read {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        save(path, &bytes).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
