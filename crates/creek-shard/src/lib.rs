//! The shard map of a Creek cluster: which shard owns which keys, who the
//! replicas of every shard are, and the epoch that grows with every change
//! (docs/shards.md).
//!
//! A cluster is several shards, each a Creek group running the replica
//! protocol for the keys it owns. The map is the directory's state: it is
//! changed by strong operations only, every change makes a new map with
//! the next epoch, and replicas and clients cache it. A replica refuses an
//! operation on keys another shard owns with the epoch of its map, so a
//! client with an older map learns to refresh it.
//!
//! Placement is per keyspace (the built-in data is the keyspace `None`):
//!
//! - **hashed** (the default): a key's *slot* is the CRC-32 (IEEE) of the
//!   key modulo [`SLOTS`], and ranges of slots are owned by shards. A key
//!   with a non-empty `{tag}` hashes only the tag, so keys that share a
//!   tag share a shard (Redis Cluster's hash tags);
//! - **ranges**: ordered key ranges with split points, so that a scan of a
//!   range stays on few shards (CockroachDB's ranges);
//! - **pinned**: the whole keyspace on one shard.
//!
//! The rule is simple enough to write again in any client (the Python
//! client's is `zlib.crc32(key) % 4096`), and [`ShardMap::owner`] is the
//! reference.
//!
//! ```
//! use creek_shard::{ShardId, ShardMap};
//!
//! let map = ShardMap::hashed(7, &[ShardId(0), ShardId(1)]);
//! let a = map.owner(None, b"{user42}.name");
//! assert_eq!(a, map.owner(None, b"{user42}.email"), "one tag, one shard");
//! ```
#![deny(missing_docs)]

mod codec;
mod moves;
mod placement;
mod rebalance;
mod txn;

use std::collections::BTreeMap;
use std::fmt;

pub use codec::{decode, encode, MapDecodeError};
pub use moves::{Move, MoveKeys};
pub use placement::{prefix_end, slot_of, Placement, SLOTS};
pub use rebalance::rebalance_slots;
pub use txn::{txn_compares_records, txn_keys, TxnKeys};

/// A shard's number in its cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(pub u16);

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

/// How to reach one replica of a shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// Its client address (`host:port`).
    pub client: String,
    /// Its peer address (`host:port`).
    pub peer: String,
}

/// One shard: its replicas by replica id. Replica ids are unique across the
/// whole cluster, so an op id (origin, seq) is too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shard {
    /// Its replicas and how to reach them.
    pub replicas: BTreeMap<u16, Endpoint>,
}

/// The cluster's shard map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMap {
    /// The cluster it belongs to (a random id chosen when the cluster is
    /// formed): a map from another cluster is refused.
    pub cluster: u64,
    /// Grows by one with every change (1: the map the cluster was formed
    /// with).
    pub epoch: u64,
    /// Every shard.
    pub shards: BTreeMap<ShardId, Shard>,
    /// Where the built-in data, and every keyspace without a placement of
    /// its own, lives.
    pub default: Placement,
    /// Keyspaces placed on their own, by name.
    pub keyspaces: BTreeMap<String, Placement>,
    /// The directory group's replicas: the group that holds this map as
    /// its state and orders its changes (empty: a map given to replicas as
    /// a file only).
    pub directory: Shard,
    /// The keys on their way from one shard to another, if a move is in
    /// flight (they belong to the shard they leave until it switches).
    pub moving: Option<Move>,
    /// The last move switched, until its mover has finished it (the
    /// target executes under the switched map and the source deleted the
    /// keys): no move begins meanwhile, so keys never move again before
    /// the shard they went to holds them.
    pub finishing: Option<Move>,
    /// How many moves have switched since the cluster was formed: a map
    /// with more has given keys other owners, one move at a time.
    pub moved: u64,
}

/// Why a map is not valid, or a change to it is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    /// The map lists no shard.
    #[error("the shard map lists no shard")]
    NoShards,
    /// A placement names a shard the map does not list.
    #[error("{what} places keys on shard {shard}, which the map does not list")]
    UnknownShard {
        /// Which placement.
        what: String,
        /// The shard.
        shard: ShardId,
    },
    /// A placement's ranges do not start at the beginning or are not in
    /// strictly increasing order.
    #[error("{what}: {why}")]
    BadRanges {
        /// Which placement.
        what: String,
        /// What is wrong.
        why: String,
    },
    /// One replica id in two shards (op ids would not be unique).
    #[error("replica {replica} is listed in shards {first} and {second}")]
    ReplicaTwice {
        /// The replica id.
        replica: u16,
        /// One shard listing it.
        first: ShardId,
        /// The other.
        second: ShardId,
    },
    /// A change made against another epoch than the map's.
    #[error("the change was made against epoch {expected}, the map is at epoch {actual}")]
    StaleEpoch {
        /// The epoch the change expected.
        expected: u64,
        /// The map's.
        actual: u64,
    },
    /// A replica id both in the directory group and in a shard.
    #[error("replica {replica} is listed in the directory and in shard {shard}")]
    DirectoryReplica {
        /// The replica id.
        replica: u16,
        /// The shard listing it.
        shard: ShardId,
    },
    /// A map of another cluster offered as the next of this one.
    #[error("the map belongs to cluster {other:016x}, not to this cluster ({ours:016x})")]
    OtherCluster {
        /// This cluster's id.
        ours: u64,
        /// The offered map's.
        other: u64,
    },
    /// A next map whose epoch is not one more than the current one's.
    #[error("the next map must have epoch {expected}; it has epoch {actual}")]
    EpochNotNext {
        /// The epoch it must have.
        expected: u64,
        /// Its epoch.
        actual: u64,
    },
    /// A map adopted in place of one of the same or a later epoch.
    #[error("a map of epoch {actual} cannot replace one of epoch {current}")]
    EpochNotLater {
        /// The epoch of the map held.
        current: u64,
        /// The other map's.
        actual: u64,
    },
    /// A change that would give keys that have an owner another owner
    /// other than by a move's switch.
    #[error(
        "the change moves keys: {what}; keys change owner only when a move switches \
         (creek admin move)"
    )]
    MovesKeys {
        /// Which placement, or which shard is dropped.
        what: String,
    },
    /// A move that cannot begin, or is not what the map holds.
    #[error("moving {what}: {why}")]
    BadMove {
        /// The move.
        what: String,
        /// What is wrong.
        why: String,
    },
    /// A switch or cancel with no move in flight.
    #[error("no move is in flight")]
    NoMove,
    /// A shard dropped while it still owns keys (or is not listed).
    #[error("shard {} cannot be removed: {why}", .shard.0)]
    ShardNotEmpty {
        /// The shard.
        shard: ShardId,
        /// Why not.
        why: String,
    },
}

/// A key an operation declares: one key, or every key starting with a
/// prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRef<'a> {
    /// One key.
    Key(&'a [u8]),
    /// Every key starting with these bytes.
    Prefix(&'a [u8]),
}

/// Why an operation cannot go to one shard.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// Its keys live on more than one shard.
    #[error("the operation's keys live on shards {}", list(.shards))]
    Spans {
        /// The shards, in order.
        shards: Vec<ShardId>,
    },
    /// It names no key, so no shard owns it.
    #[error("the operation names no key, so no shard owns it")]
    NoKeys,
}

fn list(shards: &[ShardId]) -> String {
    let names: Vec<String> = shards.iter().map(ShardId::to_string).collect();
    names.join(", ")
}

impl ShardMap {
    /// A cluster of one shard holding everything: what a cluster without
    /// shards is.
    pub fn single(cluster: u64, shard: Shard) -> Self {
        ShardMap {
            cluster,
            epoch: 1,
            shards: [(ShardId(0), shard)].into(),
            default: Placement::Pinned(ShardId(0)),
            keyspaces: BTreeMap::new(),
            directory: Shard::default(),
            moving: None,
            finishing: None,
            moved: 0,
        }
    }

    /// A map over `shards` (no replicas listed yet) whose default placement
    /// hashes keys evenly over them.
    pub fn hashed(cluster: u64, shards: &[ShardId]) -> Self {
        ShardMap {
            cluster,
            epoch: 1,
            shards: shards.iter().map(|s| (*s, Shard::default())).collect(),
            default: Placement::even_slots(shards),
            keyspaces: BTreeMap::new(),
            directory: Shard::default(),
            moving: None,
            finishing: None,
            moved: 0,
        }
    }

    /// The placement of `keyspace` (`None`: the built-in data).
    pub fn placement(&self, keyspace: Option<&str>) -> &Placement {
        keyspace
            .and_then(|k| self.keyspaces.get(k))
            .unwrap_or(&self.default)
    }

    /// The shard that owns `key` of `keyspace`.
    pub fn owner(&self, keyspace: Option<&str>, key: &[u8]) -> ShardId {
        self.placement(keyspace).owner(key)
    }

    /// The one shard owning every key of an operation, or why there is
    /// none.
    pub fn route<'a>(
        &self,
        keys: impl IntoIterator<Item = (Option<&'a str>, &'a [u8])>,
    ) -> Result<ShardId, RouteError> {
        self.route_declared(
            keys.into_iter()
                .map(|(keyspace, key)| (keyspace, KeyRef::Key(key))),
        )
    }

    /// The one shard owning every key an operation declares — keys, and
    /// every key starting with a prefix ([`Placement::owners_of_prefix`]) —
    /// or why there is none.
    pub fn route_declared<'a>(
        &self,
        keys: impl IntoIterator<Item = (Option<&'a str>, KeyRef<'a>)>,
    ) -> Result<ShardId, RouteError> {
        let mut shards = Vec::new();
        for (keyspace, key) in keys {
            match key {
                KeyRef::Key(key) => shards.push(self.owner(keyspace, key)),
                KeyRef::Prefix(prefix) => {
                    shards.extend(self.placement(keyspace).owners_of_prefix(prefix))
                }
            }
        }
        shards.sort_unstable();
        shards.dedup();
        match shards.as_slice() {
            [] => Err(RouteError::NoKeys),
            [one] => Ok(*one),
            _ => Err(RouteError::Spans { shards }),
        }
    }

    /// The shard a replica belongs to, if the map lists it.
    pub fn shard_of_replica(&self, replica: u16) -> Option<ShardId> {
        self.shards
            .iter()
            .find(|(_, s)| s.replicas.contains_key(&replica))
            .map(|(id, _)| *id)
    }

    /// Check the map: it lists a shard, every placement names listed
    /// shards and is well formed, and no replica id is in two shards or in
    /// a shard and the directory.
    pub fn validate(&self) -> Result<(), MapError> {
        if self.shards.is_empty() {
            return Err(MapError::NoShards);
        }
        self.default
            .validate("the default placement", &self.shards)?;
        for (name, p) in &self.keyspaces {
            p.validate(&format!("keyspace {name}"), &self.shards)?;
        }
        let mut seen: BTreeMap<u16, ShardId> = BTreeMap::new();
        for (id, shard) in &self.shards {
            for replica in shard.replicas.keys() {
                if let Some(first) = seen.insert(*replica, *id) {
                    return Err(MapError::ReplicaTwice {
                        replica: *replica,
                        first,
                        second: *id,
                    });
                }
            }
        }
        for replica in self.directory.replicas.keys() {
            if let Some(shard) = seen.get(replica) {
                return Err(MapError::DirectoryReplica {
                    replica: *replica,
                    shard: *shard,
                });
            }
        }
        if let Some(m) = &self.moving {
            m.validate(self)?;
        }
        if let Some(m) = &self.finishing {
            if self.moving.is_some() {
                return Err(MapError::BadMove {
                    what: m.to_string(),
                    why: "a move is in flight while the last one is finishing".into(),
                });
            }
            for shard in [m.from, m.to] {
                if !self.shards.contains_key(&shard) {
                    return Err(MapError::BadMove {
                        what: m.to_string(),
                        why: format!("the map does not list shard {}", shard.0),
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether `next` may follow this map in the directory: the same
    /// cluster, the next epoch, a valid map, and no key that has an owner
    /// gets another one — the default placement and every placed keyspace
    /// stay as they are and no shard is dropped. New keyspace placements,
    /// new shards, and changes of members and addresses (of shards and of
    /// the directory) are what a change may bring.
    ///
    /// Keys change owner only through a move's steps (`moves.rs`): one
    /// begins, switches or is cancelled, or a shard that owns nothing is
    /// dropped.
    pub fn check_next(&self, next: &ShardMap) -> Result<(), MapError> {
        if next.cluster == self.cluster && next.epoch != self.epoch + 1 {
            return Err(MapError::EpochNotNext {
                expected: self.epoch + 1,
                actual: next.epoch,
            });
        }
        if next.cluster == self.cluster {
            if let Some(step) = self.check_move_step(next) {
                next.validate()?;
                return step;
            }
        }
        self.check_later(next)
    }

    /// Whether a replica or client holding this map takes `next` in its
    /// place: `Ok(true)` for a later map that may follow it
    /// ([`ShardMap::check_later`]), `Ok(false)` for one of this cluster no
    /// newer than it, and the reason otherwise (another cluster, keys
    /// given another owner).
    pub fn superseded_by(&self, next: &ShardMap) -> Result<bool, MapError> {
        if next.cluster == self.cluster && next.epoch <= self.epoch {
            return Ok(false);
        }
        self.check_later(next).map(|()| true)
    }

    /// Whether `next`, a map of any later epoch, may have come from this
    /// one by changes [`ShardMap::check_next`] allows: the same cluster, a
    /// greater epoch, a valid map, and every key with the owner it has here
    /// — unless moves switched in between (each checked as the directory
    /// ordered it). What a replica or client that skipped epochs checks of
    /// the map it adopts.
    pub fn check_later(&self, next: &ShardMap) -> Result<(), MapError> {
        if next.cluster != self.cluster {
            return Err(MapError::OtherCluster {
                ours: self.cluster,
                other: next.cluster,
            });
        }
        if next.epoch <= self.epoch {
            return Err(MapError::EpochNotLater {
                current: self.epoch,
                actual: next.epoch,
            });
        }
        next.validate()?;
        if next.moved > self.moved {
            return Ok(());
        }
        if next.moved < self.moved {
            return Err(MapError::MovesKeys {
                what: format!(
                    "it counts {} moves switched, this map {}",
                    next.moved, self.moved
                ),
            });
        }
        if next.default != self.default {
            return Err(MapError::MovesKeys {
                what: "the default placement".into(),
            });
        }
        for (name, p) in &self.keyspaces {
            if next.keyspaces.get(name) != Some(p) {
                return Err(MapError::MovesKeys {
                    what: format!("the placement of keyspace {name}"),
                });
            }
        }
        let dropped = self.shards.keys().filter(|s| !next.shards.contains_key(s));
        for gone in dropped {
            if let Some(why) = self.keys_of(*gone) {
                return Err(MapError::MovesKeys {
                    what: format!("shard {} is dropped and {why}", gone.0),
                });
            }
        }
        Ok(())
    }

    /// Whether `replica` is one of the directory group's.
    pub fn is_directory_replica(&self, replica: u16) -> bool {
        self.directory.replicas.contains_key(&replica)
    }

    /// The map with `keyspace` (`None`: the default) placed by
    /// `placement`, at the next epoch. Refused if made against another
    /// epoch than `expected`, or if the result is not valid; the map is
    /// unchanged either way.
    pub fn place(
        &self,
        expected: u64,
        keyspace: Option<&str>,
        placement: Placement,
    ) -> Result<ShardMap, MapError> {
        if expected != self.epoch {
            return Err(MapError::StaleEpoch {
                expected,
                actual: self.epoch,
            });
        }
        let mut next = self.clone();
        match keyspace {
            None => next.default = placement,
            Some(name) => {
                next.keyspaces.insert(name.to_owned(), placement);
            }
        }
        next.epoch += 1;
        next.validate()?;
        Ok(next)
    }

    /// Every shard's number, in order.
    pub fn shard_ids(&self) -> Vec<ShardId> {
        self.shards.keys().copied().collect()
    }
}

#[cfg(test)]
mod moves_tests;
#[cfg(test)]
mod tests;
