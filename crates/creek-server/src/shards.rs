//! A replica of one shard of a sharded cluster: the shard map it serves
//! under, and the check every client call meets before it is accepted —
//! a call on keys another shard owns is refused with `WRONG_SHARD` and
//! changes nothing (docs/shards.md).

// tonic's handlers return `Status` by value.
#![allow(clippy::result_large_err)]

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use creek_procs::{Registry, Route};
use creek_shard::{ShardId, ShardMap};
use creek_types::value::{decode_args, Value};
use creek_types::ProcCall;
use tonic::Status;

use crate::config::{ConfigError, ServerConfig};

/// The first word of a refusal's message for a call on keys this
/// replica's shard does not own; the message goes on with the map's
/// epoch as `(map epoch N)` and the owning shard as `shard S owns`.
pub const WRONG_SHARD: &str = "WRONG_SHARD";

/// What a replica of a sharded cluster checks calls against.
#[derive(Debug)]
pub struct ShardGate {
    map: ShardMap,
    /// The map as the file held it, for clients to learn (`Status`).
    encoded: Bytes,
    shard: ShardId,
    registry: Arc<Registry>,
}

impl ShardGate {
    /// The gate of `config`'s replica, if it names a shard map: the map
    /// must decode, list this replica, and give its shard exactly the
    /// replicas the configuration names.
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
        let shard = map.shard_of_replica(me).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "replica {me} is not in the shard map {} (cluster {:016x}, epoch {}): \
                 configure it into a shard the map lists",
                path.display(),
                map.cluster,
                map.epoch
            ))
        })?;
        let listed: Vec<u16> = map.shards[&shard].replicas.keys().copied().collect();
        let mut configured: Vec<u16> = config.replicas.iter().map(|r| r.id).collect();
        configured.sort_unstable();
        if listed != configured {
            return Err(ConfigError::Invalid(format!(
                "the shard map {} lists replicas {listed:?} in shard {}; this \
                 configuration names {configured:?}",
                path.display(),
                shard.0
            )));
        }
        Ok(Some(Arc::new(ShardGate {
            map,
            encoded,
            shard,
            registry,
        })))
    }

    /// The map's bytes ([`creek_shard::encode`]).
    pub fn encoded(&self) -> &Bytes {
        &self.encoded
    }

    /// This replica's shard.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// Accept `call` if this shard may run it: its key is this shard's,
    /// or it is state every shard keeps. On a cluster of one shard every
    /// call is accepted.
    pub fn check(&self, call: &ProcCall) -> Result<(), Status> {
        if self.map.shards.len() == 1 {
            return Ok(());
        }
        match self.registry.route_of(&call.name) {
            Route::Everywhere => Ok(()),
            Route::Arg(n) => {
                // Malformed arguments are refused by the registry's check.
                let Some(key) = key_arg(call, n) else {
                    return Ok(());
                };
                let owner = self.map.owner(None, &key);
                if owner == self.shard {
                    Ok(())
                } else {
                    Err(Status::failed_precondition(format!(
                        "{WRONG_SHARD}: {} on key {} goes to another shard: shard {} owns it \
                         (map epoch {}); this replica serves shard {}",
                        call.name,
                        Value::Bytes(key),
                        owner.0,
                        self.map.epoch,
                        self.shard.0
                    )))
                }
            }
            Route::Unknown => Err(Status::failed_precondition(format!(
                "{}: its keys are known only as it runs, so a cluster of {} shards cannot \
                 route it (operations across shards are not supported yet)",
                call.name,
                self.map.shards.len()
            ))),
        }
    }
}

fn read(path: &Path) -> Result<Bytes, ConfigError> {
    std::fs::read(path)
        .map(Bytes::from)
        .map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })
}

/// Argument `n` of `call` if it is bytes.
fn key_arg(call: &ProcCall, n: usize) -> Option<Bytes> {
    match decode_args(&call.args).ok()?.into_iter().nth(n)? {
        Value::Bytes(b) => Some(b),
        _ => None,
    }
}

/// Configurations of a sharded cluster on loopback (`creek dev
/// --shards`): `shards` groups of `replicas` replicas, replica ids
/// counting up across shards (shard `s` holds `s * replicas + 1 ..`),
/// replica `i` listening for clients on `client_base + i - 1` and for
/// peers on `peer_base + i - 1`, with its data under `data_root/r{i}`;
/// every configuration names `map_path`. Returns them with the map (keys
/// hashed evenly over the shards) for `cluster`, which the caller writes
/// to `map_path`.
pub fn local_shards(
    shards: u16,
    replicas: u16,
    client_base: u16,
    peer_base: u16,
    data_root: &Path,
    map_path: &Path,
    cluster: u64,
) -> Result<(Vec<ServerConfig>, ShardMap), ConfigError> {
    let n = shards
        .checked_mul(replicas)
        .filter(|n| *n > 0)
        .ok_or_else(|| ConfigError::Invalid("a cluster needs a shard of one replica".into()))?;
    let port = |base: u16, i: u16| {
        base.checked_add(i)
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
            .ok_or_else(|| ConfigError::Invalid(format!("port {base} + {i} overflows")))
    };
    let ids: Vec<ShardId> = (0..shards).map(ShardId).collect();
    let mut map = ShardMap::hashed(cluster, &ids);
    let mut configs = Vec::with_capacity(usize::from(n));
    for s in 0..shards {
        let group = (0..replicas)
            .map(|k| {
                let i = s * replicas + k;
                Ok(crate::config::ReplicaAddr {
                    id: i + 1,
                    client_addr: port(client_base, i)?,
                    peer_addr: port(peer_base, i)?,
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let shard = map.shards.entry(ShardId(s)).or_default();
        for r in &group {
            shard.replicas.insert(
                r.id,
                creek_shard::Endpoint {
                    client: r.client_addr.to_string(),
                    peer: r.peer_addr.to_string(),
                },
            );
        }
        for r in &group {
            let mut c =
                ServerConfig::new(r.id, group.clone(), data_root.join(format!("r{}", r.id)));
            c.shard_map = Some(map_path.to_owned());
            c.validate()?;
            configs.push(c);
        }
    }
    map.validate()
        .map_err(|e| ConfigError::Invalid(format!("the shard map: {e}")))?;
    Ok((configs, map))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use creek_types::value::encode_args;

    /// A directory of its own under the system's temporary one.
    fn dir(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("creek-shard-gate-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Two shards of three on loopback, the map written; replica `id`'s
    /// configuration.
    fn cluster(name: &str) -> (Vec<ServerConfig>, ShardMap, std::path::PathBuf) {
        let d = dir(name);
        let path = d.join("shard-map.bin");
        let (configs, map) = local_shards(2, 3, 21001, 21101, &d, &path, 7).unwrap();
        std::fs::write(&path, creek_shard::encode(&map)).unwrap();
        (configs, map, path)
    }

    fn registry() -> Arc<Registry> {
        Arc::new(Registry::with_builtins())
    }

    fn call(name: &str, key: &str) -> ProcCall {
        ProcCall::new(name, encode_args(&[Value::from(key), Value::from("v")]))
    }

    #[test]
    fn a_replica_accepts_its_keys_and_refuses_the_others() {
        let (configs, map, _) = cluster("route");
        let gate = ShardGate::load(&configs[0], registry()).unwrap().unwrap();
        assert_eq!(gate.shard(), ShardId(0));
        let key_of = |s: u16| {
            (0..)
                .map(|n| format!("k{n}"))
                .find(|k| map.owner(None, k.as_bytes()) == ShardId(s))
                .unwrap()
        };
        assert!(gate.check(&call("kv.put", &key_of(0))).is_ok());
        let refused = gate.check(&call("kv.put", &key_of(1))).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert!(
            refused.message().starts_with(WRONG_SHARD),
            "{}",
            refused.message()
        );
        assert!(refused.message().contains("shard 1 owns it (map epoch 1)"));
        // Definitions go everywhere; procedures whose keys are unknown
        // nowhere.
        assert!(gate
            .check(&ProcCall::new("proc.list", encode_args(&[])))
            .is_ok());
        let unknown = gate
            .check(&ProcCall::new("ycsb.load", encode_args(&[])))
            .unwrap_err();
        assert!(unknown.message().contains("known only as it runs"));
    }

    #[test]
    fn maps_that_do_not_fit_the_replica_are_refused() {
        let (configs, _, path) = cluster("refuse");
        // A replica the map does not list.
        let mut stranger = configs[0].clone();
        stranger.id = 9;
        stranger.replicas[0].id = 9;
        let e = ShardGate::load(&stranger, registry())
            .unwrap_err()
            .to_string();
        assert!(e.contains("replica 9 is not in the shard map"), "{e}");
        // A replica configured with a group the map's shard does not match.
        let mut mixed = configs[0].clone();
        mixed.replicas = vec![
            configs[0].replicas[0].clone(),
            configs[3].replicas[0].clone(),
        ];
        let e = ShardGate::load(&mixed, registry()).unwrap_err().to_string();
        assert!(e.contains("lists replicas [1, 2, 3] in shard 0"), "{e}");
        // A file that is not a map.
        std::fs::write(&path, b"not a map").unwrap();
        let e = ShardGate::load(&configs[0], registry())
            .unwrap_err()
            .to_string();
        assert!(e.contains("shard map"), "{e}");
        // No file.
        std::fs::remove_file(&path).unwrap();
        let e = ShardGate::load(&configs[0], registry())
            .unwrap_err()
            .to_string();
        assert!(e.contains("reading"), "{e}");
        // No map configured: no gate.
        let mut plain = configs[0].clone();
        plain.shard_map = None;
        assert!(ShardGate::load(&plain, registry()).unwrap().is_none());
    }
}
