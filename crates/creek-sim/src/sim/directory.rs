//! The directory of a sharded cluster (docs/shards.md, "The directory"): a
//! Creek group of its own holding the shard map, under the same faults as
//! the shards; an operator that keeps the map's members true to the
//! groups' by strong `directory.set` ops; shard replicas that follow the
//! directory's committed map over the network; and clients that cache the
//! map, route by it, and refresh it from the directory.
//!
//! What the runs check of it: the directory group passes every check a
//! shard does (its own history of the operator's ops); every map a replica
//! or client adopts is a later map of the same cluster that gives no key
//! another owner (`ShardMap::check_later`); and a run settles only once
//! the directory's map lists each group's members and every shard member
//! serves under it.

use creek_procs::builtins::directory::{MAP, MAP_KEY, SET};
use creek_types::value::{encode_args, Value};

use super::*;

/// How often shard replicas ask the directory for its map, the operator
/// looks at the groups, and clients that want a fresher map ask for one.
/// The server asks once a second; simulated runs last a few hundred
/// milliseconds, so the simulator asks more often.
pub(super) const FOLLOW_US: u64 = 50_000;

/// The `client` of the operator's ops in the history.
pub(super) const OPERATOR_CLIENT: u32 = u32::MAX - 1;

/// What the operator knows of the directory's map.
#[derive(Clone, Debug)]
enum Known {
    /// Nothing: read it (strong `directory.map`).
    Unread,
    /// The directory holds no map yet: form it with the seed map.
    Empty,
    /// This map, as of the last op that read or set it.
    Map(Arc<ShardMap>),
}

/// The directory's part of a simulation.
pub(super) struct Dir {
    /// Its replicas' registry: the built-ins and `directory.*`.
    pub(super) registry: Arc<Registry>,
    /// The map each slot serves under (a shard replica's is its map file:
    /// kept across crashes, replaced by a newer one from the directory).
    held: Vec<Arc<ShardMap>>,
    /// The map the cluster was formed with.
    seed: Arc<ShardMap>,
    known: Known,
    /// The operator's op in flight: its history record, and for a
    /// `directory.set` the map it installs.
    pending: Option<(usize, Option<Arc<ShardMap>>)>,
    /// Maps adopted that a later map could not be: an epoch going back,
    /// another cluster, a key given another owner.
    pub(super) violations: Vec<String>,
}

impl Dir {
    pub(super) fn new(registry: Arc<Registry>, seed: &Arc<ShardMap>, slots: usize) -> Self {
        Dir {
            registry,
            held: vec![seed.clone(); slots],
            seed: seed.clone(),
            known: Known::Unread,
            pending: None,
            violations: Vec::new(),
        }
    }

    /// The epoch of the map slot `i` serves under.
    pub(super) fn held_epoch(&self, i: usize) -> u64 {
        self.held[i].epoch
    }
}

/// Whether a holder of `held` takes `next` (the rule a replica's gate
/// follows: `ShardMap::superseded_by`), or the violation a map that could
/// not follow it is.
fn later(held: &ShardMap, next: &ShardMap, who: &str) -> Result<bool, String> {
    held.superseded_by(next).map_err(|e| {
        format!(
            "{who} was handed map epoch {} over epoch {}: {e}",
            next.epoch, held.epoch
        )
    })
}

impl Sim {
    /// The directory's group number (after the shards).
    pub(super) fn directory_group(&self) -> Option<usize> {
        self.dir.as_ref().map(|_| self.cfg.shards)
    }

    /// The map a directory replica has committed, if it is up and holds one.
    fn committed_map(&self, d: usize) -> Option<Arc<ShardMap>> {
        let node = &self.nodes[d].node;
        if !node.is_up() || node.is_lost() {
            return None;
        }
        let bytes = node.committed_state().remove(MAP_KEY)?;
        // The directory procedure only stores maps that decode.
        creek_shard::decode(&bytes).ok().map(Arc::new)
    }

    /// A directory replica that is up, holds its data and is in the group.
    pub(super) fn some_directory_replica(&mut self) -> Option<usize> {
        let g = self.directory_group()?;
        let up: Vec<usize> = self
            .member_slots(g)
            .into_iter()
            .filter(|&d| self.nodes[d].node.is_up() && !self.nodes[d].node.is_lost())
            .collect();
        (!up.is_empty()).then(|| up[self.rng.index(up.len())])
    }

    /// Every `FOLLOW_US`: the operator's next step, every shard replica
    /// asks a directory replica for its map, and clients that want a newer
    /// map ask for one.
    pub(super) fn directory_tick(&mut self) {
        let Some(g) = self.directory_group() else {
            return;
        };
        self.operator_step();
        for i in 0..g * self.per_shard {
            if self.nodes[i].slot != Slot::Member || !self.nodes[i].node.is_up() {
                continue;
            }
            let Some(d) = self.some_directory_replica() else {
                break;
            };
            for at in self.net.send(&mut self.rng, self.now, i, d, 64) {
                self.schedule(at, Ev::MapAsk { from: i, to: d });
            }
        }
        for c in 0..self.clients.len() {
            if self.clients[c].refresh {
                self.client_refresh(c);
            }
        }
        self.schedule(self.now + FOLLOW_US, Ev::Directory);
    }

    /// Directory replica `to` answers `from`'s ask with its committed map.
    pub(super) fn map_ask(&mut self, from: usize, to: usize) {
        let Some(map) = self.committed_map(to) else {
            return;
        };
        let bytes = creek_shard::encode(&map).len();
        for at in self.net.send(&mut self.rng, self.now, to, from, bytes) {
            self.schedule(
                at,
                Ev::MapAnswer {
                    to: from,
                    map: map.clone(),
                },
            );
        }
    }

    /// Shard replica `to` adopts `map` if it is newer and still places it
    /// in its shard (as the server's gate does).
    pub(super) fn map_answer(&mut self, to: usize, map: Arc<ShardMap>) {
        if !self.nodes[to].node.is_up() {
            return;
        }
        let group = self.group_of(to);
        let Some(dir) = self.dir.as_mut() else {
            return;
        };
        match later(&dir.held[to], &map, &format!("replica {to}")) {
            Ok(false) => {}
            Ok(true) => {
                let me = to as u16 + 1;
                if map.shard_of_replica(me) == Some(ShardId(group as u16)) {
                    dir.held[to] = map;
                    *self.faults.entry("map_adopted").or_default() += 1;
                } else {
                    // Not listed (yet, or any more): it keeps its map.
                    *self.faults.entry("map_not_placing").or_default() += 1;
                }
            }
            Err(v) => dir.violations.push(v),
        }
    }

    /// Client `c` asks a directory replica its map lists for the map.
    fn client_refresh(&mut self, c: usize) {
        let listed: Vec<usize> = self.clients[c]
            .map
            .directory
            .replicas
            .keys()
            .map(|r| usize::from(*r) - 1)
            .collect();
        if listed.is_empty() {
            return;
        }
        let d = listed[self.rng.index(listed.len())];
        let Some(map) = self.committed_map(d) else {
            return;
        };
        let Some(dir) = self.dir.as_mut() else {
            return;
        };
        match later(&self.clients[c].map, &map, &format!("client {c}")) {
            Ok(true) => {
                self.clients[c].map = map;
                *self.faults.entry("client_map_refreshed").or_default() += 1;
            }
            Ok(false) => {}
            Err(v) => dir.violations.push(v),
        }
        self.clients[c].refresh = false;
    }

    /// The replica client `c` sends ops of `shard` to: the one it used,
    /// unless that one left the group. Then the client gives up on its ops
    /// there that had no final view yet and moves to a member: on a
    /// sharded cluster, another of the shard's replicas its map lists (a
    /// removed replica refuses, so the client tries the next), and it asks
    /// the directory for a newer map.
    pub(super) fn client_replica(&mut self, c: usize, shard: usize) -> usize {
        let left = self.clients[c].replicas[shard];
        if self.nodes[left].slot == Slot::Member {
            return left;
        }
        for r in &mut self.history.ops {
            if r.client == c as u32 && r.replica == left && r.final_view().is_none() {
                r.origin_left = true;
            }
        }
        let listed: Vec<usize> = match (
            &self.dir,
            self.clients[c].map.shards.get(&ShardId(shard as u16)),
        ) {
            (Some(_), Some(s)) => s
                .replicas
                .keys()
                .map(|r| usize::from(*r) - 1)
                .filter(|&i| self.nodes[i].slot == Slot::Member)
                .collect(),
            _ => Vec::new(),
        };
        let choices = if listed.is_empty() {
            // One group (no directory), or a map this stale it lists no
            // member left: the group's members, as the client was given.
            if self.dir.is_some() {
                *self
                    .faults
                    .entry("client_map_listed_no_member")
                    .or_default() += 1;
            }
            self.member_slots(shard)
        } else {
            listed
        };
        self.clients[c].refresh = self.dir.is_some();
        let pick = choices[self.rng.index(choices.len())];
        self.clients[c].replicas[shard] = pick;
        pick
    }

    /// A reply from replica `i` tells client `c` the epoch `i` serves
    /// under; a newer one than the client's makes it ask for the map.
    pub(super) fn note_epoch(&mut self, c: usize, i: usize) {
        if let Some(dir) = &self.dir {
            if dir.held_epoch(i) > self.clients[c].map.epoch {
                self.clients[c].refresh = true;
            }
        }
    }

    /// The map the directory's map should be: the one it holds (or the
    /// seed) with each group's members as the groups have them.
    fn desired(&self, from: &ShardMap) -> ShardMap {
        let in_group = self.in_group();
        let members = |g: usize| -> BTreeMap<u16, creek_shard::Endpoint> {
            self.group_slots(g)
                .filter(|&i| in_group[i])
                .map(|i| (i as u16 + 1, creek_shard::Endpoint::default()))
                .collect()
        };
        let mut next = from.clone();
        for (id, shard) in next.shards.iter_mut() {
            shard.replicas = members(usize::from(id.0));
        }
        next.directory.replicas = members(self.cfg.shards);
        next
    }

    /// The operator's next step, when none is in flight: read the map if
    /// it does not know it, form the directory if it holds none, or
    /// install a map listing the groups' members if they changed.
    fn operator_step(&mut self) {
        let Some(pending) = self.dir.as_ref().map(|d| d.pending.as_ref().map(|p| p.0)) else {
            return;
        };
        if let Some(index) = pending {
            let at = self.history.ops[index].replica;
            if self.nodes[at].slot == Slot::Member {
                return;
            }
            // Its replica left the group: a removed replica may never
            // answer (one that has not learnt it was removed keeps the op
            // and asks for elections nobody holds). Like a client, the
            // operator gives up on the op and reads the map again at a
            // member; a `directory.set` that commits after all only makes
            // the next one, for the epoch it read, refused and read again.
            self.history.ops[index].origin_left = true;
            self.nodes[at].handles.retain(|_, i| *i != index);
            if let Some(dir) = self.dir.as_mut() {
                dir.pending = None;
                dir.known = Known::Unread;
            }
        }
        let Some(dir) = &self.dir else {
            return;
        };
        let (args, name, installs) = match &dir.known {
            Known::Unread => (Vec::new(), MAP, None),
            Known::Empty => {
                let seed = dir.seed.clone();
                let bytes = creek_shard::encode(&seed);
                (vec![Value::Int(0), Value::Bytes(bytes)], SET, Some(seed))
            }
            Known::Map(map) => {
                let mut next = self.desired(map);
                if next == **map {
                    // Nothing to change as far as it knows. While keys
                    // move, others change the map too (a shard added or
                    // dropped): read it again before the next step.
                    if self.cfg.moves > 0 {
                        if let Some(dir) = self.dir.as_mut() {
                            dir.known = Known::Unread;
                        }
                    }
                    return;
                }
                next.epoch += 1;
                let next = Arc::new(next);
                let expected = i64::try_from(map.epoch).unwrap_or(i64::MAX);
                let bytes = creek_shard::encode(&next);
                (
                    vec![Value::Int(expected), Value::Bytes(bytes)],
                    SET,
                    Some(next),
                )
            }
        };
        let Some(d) = self.some_directory_replica() else {
            return;
        };
        let request = Request {
            call: ProcCall::new(name, encode_args(&args)),
            strong: true,
            views: Views::BOTH,
            read_time: 0,
            read_exact: false,
            read_revision: None,
        };
        let index = self.history.ops.len();
        if let Some(dir) = self.dir.as_mut() {
            dir.pending = Some((index, installs));
        }
        if !self.invoke_as(d, OPERATOR_CLIENT, request) {
            if let Some(dir) = self.dir.as_mut() {
                dir.pending = None;
            }
        }
    }

    /// The operator's op at history record `index` is over: what it
    /// learned of the directory's map.
    pub(super) fn operator_done(&mut self, index: usize) {
        let Some(dir) = self.dir.as_mut() else {
            return;
        };
        let Some((pending, installs)) = dir.pending.take() else {
            return;
        };
        debug_assert_eq!(pending, index, "one operator op at a time");
        let record = &self.history.ops[index];
        let outcome = record.final_view().map(|v| v.outcome.clone());
        if debug_log() {
            eprintln!(
                "operator: {} at replica {} at {} us: {:?}",
                record.call.name,
                record.replica,
                self.now,
                outcome.as_ref().map(|o| o.as_ref().map(|_| "ok"))
            );
        }
        dir.known = match (outcome, installs) {
            // Installed: the directory holds this map now.
            (Some(Ok(_)), Some(map)) => Known::Map(map),
            (Some(Ok(bytes)), None) => match Value::decode(&bytes) {
                Ok(Value::Nil) => Known::Empty,
                Ok(Value::Bytes(b)) => match creek_shard::decode(&b) {
                    Ok(map) => Known::Map(Arc::new(map)),
                    Err(e) => {
                        dir.violations
                            .push(format!("the directory's map does not decode: {e}"));
                        Known::Unread
                    }
                },
                other => {
                    dir.violations
                        .push(format!("directory.map answered {other:?}"));
                    Known::Unread
                }
            },
            // Refused (another epoch), or no final view (its replica
            // crashed): read the map again.
            _ => Known::Unread,
        };
    }

    /// The map the directory's replicas in the group hold, if one does.
    pub(super) fn directory_map(&self, in_group: &[bool]) -> Option<Arc<ShardMap>> {
        let g = self.directory_group()?;
        self.group_slots(g)
            .filter(|&d| in_group[d])
            .find_map(|d| self.committed_map(d))
    }

    /// The epoch of the map the directory holds (0: none).
    pub(super) fn directory_epoch(&self, in_group: &[bool]) -> u64 {
        self.directory_map(in_group).map_or(0, |m| m.epoch)
    }

    /// Where the directory has not settled: its map must list every
    /// group's members, and every shard replica in its group serve under
    /// it. Empty when it has (and without a directory): what a settled
    /// sharded run has.
    pub(super) fn directory_lag(&self, in_group: &[bool]) -> Vec<String> {
        let (Some(g), Some(dir)) = (self.directory_group(), &self.dir) else {
            return Vec::new();
        };
        let Some(map) = self.directory_map(in_group) else {
            return vec!["no directory replica holds a map".into()];
        };
        let mut out = Vec::new();
        if self.moves.under_way() || map.moving.is_some() || map.finishing.is_some() {
            out.push(format!(
                "a move of keys is under way (map epoch {}, {} moves switched)",
                map.epoch, map.moved
            ));
        }
        if *map != self.desired(&map) {
            out.push(format!(
                "the directory's map (epoch {}) does not list the groups' members",
                map.epoch
            ));
        }
        for i in (0..g * self.per_shard).filter(|&i| in_group[i]) {
            // A shard outside the map (not added yet, or dropped) serves
            // under the last map that placed it.
            if !map.shards.contains_key(&ShardId(self.group_of(i) as u16)) {
                continue;
            }
            if dir.held[i].epoch != map.epoch {
                out.push(format!(
                    "replica {i} serves under map epoch {}, the directory's is {}",
                    dir.held[i].epoch, map.epoch
                ));
            }
        }
        out
    }
}
