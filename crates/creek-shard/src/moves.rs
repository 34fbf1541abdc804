//! Moving keys between shards as map changes (docs/shards.md, "Moving
//! keys"): a move **begins** (the map names the keys on their way, which
//! still belong to the shard they leave), then **switches** (one change
//! gives them to the shard they go to) or is **cancelled** (nothing
//! changes owner). A shard that owns nothing any more may be **dropped**.
//!
//! Each step is a map at the next epoch, made against the epoch it read,
//! as every change is. At most one move is in flight in a cluster.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::{MapError, Placement, ShardId, ShardMap, SLOTS};

/// Keys on their way from one shard to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// Whose placement they are placed by: `None` the default's (the
    /// built-in data's), else a keyspace's own.
    pub keyspace: Option<String>,
    /// Which of its keys.
    pub keys: MoveKeys,
    /// The shard that owns them until the move switches.
    pub from: ShardId,
    /// The shard that owns them after.
    pub to: ShardId,
}

/// Which keys of a placement move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MoveKeys {
    /// The keys of hash slots `first..end` of a hashed placement.
    Slots {
        /// The first slot.
        first: u16,
        /// The slot after the last ([`SLOTS`] at most).
        end: u16,
    },
    /// The keys from `first` up to `end` (not included; `None`: every key
    /// after `first`) of a placement by ranges.
    Range {
        /// The first key.
        first: Bytes,
        /// The first key after them, if any.
        end: Option<Bytes>,
    },
    /// Every key of a pinned placement.
    All,
}

impl MoveKeys {
    /// Whether `key`, of a placement this move applies to, is among them.
    pub fn contains(&self, key: &[u8]) -> bool {
        match self {
            MoveKeys::Slots { first, end } => (*first..*end).contains(&crate::slot_of(key)),
            MoveKeys::Range { first, end } => {
                first[..] <= *key && end.as_ref().is_none_or(|e| *key < e[..])
            }
            MoveKeys::All => true,
        }
    }
}

impl std::fmt::Display for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let of = match &self.keyspace {
            Some(name) => format!("keyspace {name}"),
            None => "the default placement".to_owned(),
        };
        match &self.keys {
            MoveKeys::Slots { first, end } => write!(f, "slots {first}..{end} of {of}")?,
            MoveKeys::Range { first, end } => write!(
                f,
                "keys {:?}..{} of {of}",
                String::from_utf8_lossy(first),
                end.as_ref().map_or("the end".to_owned(), |e| format!(
                    "{:?}",
                    String::from_utf8_lossy(e)
                ))
            )?,
            MoveKeys::All => write!(f, "every key of {of}")?,
        }
        write!(f, " from shard {} to shard {}", self.from.0, self.to.0)
    }
}

impl Move {
    /// Check the move against `map` (which it is in flight in, or about to
    /// begin in): two listed shards, keys of the kind its placement has,
    /// all owned by `from`.
    pub(crate) fn validate(&self, map: &ShardMap) -> Result<(), MapError> {
        let bad = |why: String| MapError::BadMove {
            what: self.to_string(),
            why,
        };
        for shard in [self.from, self.to] {
            if !map.shards.contains_key(&shard) {
                return Err(bad(format!("the map does not list shard {}", shard.0)));
            }
        }
        if self.from == self.to {
            return Err(bad("the keys would stay where they are".into()));
        }
        let placement = match &self.keyspace {
            None => &map.default,
            Some(name) => map.keyspaces.get(name).ok_or_else(|| {
                bad(format!(
                    "keyspace {name} has no placement of its own (its keys move with the \
                     default placement's)"
                ))
            })?,
        };
        let owned = match (placement, &self.keys) {
            (Placement::Hashed(slots), MoveKeys::Slots { first, end }) => {
                if first >= end || *end > SLOTS {
                    return Err(bad(format!("slots must be a range within 0..{SLOTS}")));
                }
                let owners = slot_owners(slots);
                owners[usize::from(*first)..usize::from(*end)]
                    .iter()
                    .all(|s| *s == self.from)
            }
            (Placement::Ranges(ranges), MoveKeys::Range { first, end }) => {
                if end.as_ref().is_some_and(|e| e <= first) {
                    return Err(bad("the range must end after its first key".into()));
                }
                range_owned_by(ranges, first, end.as_ref(), self.from)
            }
            (Placement::Pinned(s), MoveKeys::All) => *s == self.from,
            _ => return Err(bad("the keys are not of the kind the placement has".into())),
        };
        if !owned {
            return Err(bad(format!(
                "shard {} does not own all of them",
                self.from.0
            )));
        }
        Ok(())
    }

    /// `placement` with the moving keys given to `to`.
    fn switched(&self, placement: &Placement) -> Placement {
        match (placement, &self.keys) {
            (Placement::Hashed(slots), MoveKeys::Slots { first, end }) => {
                let mut owners = slot_owners(slots);
                owners[usize::from(*first)..usize::from(*end)].fill(self.to);
                Placement::Hashed(runs(owners.into_iter().enumerate().map(|(slot, s)| {
                    // Lossless: fewer than SLOTS slots.
                    (slot as u16, s)
                })))
            }
            (Placement::Ranges(ranges), MoveKeys::Range { first, end }) => {
                let mut bounds: BTreeMap<Bytes, ShardId> = ranges.iter().cloned().collect();
                if let Some(end) = end {
                    let after = last_at_or_below(ranges, end);
                    bounds.insert(end.clone(), after);
                }
                bounds.retain(|k, _| k < first || end.as_ref().is_some_and(|e| k >= e));
                bounds.insert(first.clone(), self.to);
                Placement::Ranges(runs(bounds))
            }
            _ => Placement::Pinned(self.to),
        }
    }
}

/// The owner of every slot of a valid hashed placement.
fn slot_owners(slots: &[(u16, ShardId)]) -> Vec<ShardId> {
    let mut owners = vec![ShardId(0); usize::from(SLOTS)];
    for (i, (first, shard)) in slots.iter().enumerate() {
        let end = slots.get(i + 1).map_or(SLOTS, |(next, _)| *next);
        owners[usize::from(*first)..usize::from(end)].fill(*shard);
    }
    owners
}

/// The entries of `bounds` where the owner changes.
fn runs<K>(bounds: impl IntoIterator<Item = (K, ShardId)>) -> Vec<(K, ShardId)> {
    let mut out: Vec<(K, ShardId)> = Vec::new();
    for (first, shard) in bounds {
        if out.last().is_none_or(|(_, last)| *last != shard) {
            out.push((first, shard));
        }
    }
    out
}

/// The owner of `key` under a valid placement by ranges.
fn last_at_or_below(ranges: &[(Bytes, ShardId)], key: &[u8]) -> ShardId {
    Placement::Ranges(ranges.to_vec()).owner(key)
}

/// Whether `shard` owns every key from `first` up to `end` under a valid
/// placement by ranges.
fn range_owned_by(
    ranges: &[(Bytes, ShardId)],
    first: &Bytes,
    end: Option<&Bytes>,
    shard: ShardId,
) -> bool {
    last_at_or_below(ranges, first) == shard
        && ranges
            .iter()
            .filter(|(k, _)| k > first && end.is_none_or(|e| k < e))
            .all(|(_, s)| *s == shard)
}

impl ShardMap {
    /// The map with `m` begun, at the next epoch. Refused if made against
    /// another epoch than `expected`, if a move is in flight, or if `m` is
    /// not a move of keys `from` owns.
    pub fn begin_move(&self, expected: u64, m: Move) -> Result<ShardMap, MapError> {
        self.expect(expected)?;
        if let Some(inflight) = &self.moving {
            return Err(MapError::BadMove {
                what: m.to_string(),
                why: format!("another move is in flight: {inflight}"),
            });
        }
        if let Some(last) = &self.finishing {
            return Err(MapError::BadMove {
                what: m.to_string(),
                why: format!("the last move is finishing: {last}"),
            });
        }
        m.validate(self)?;
        let mut next = self.clone();
        next.moving = Some(m);
        next.epoch += 1;
        Ok(next)
    }

    /// The map with the move in flight switched — its keys given to the
    /// shard they go to — at the next epoch.
    pub fn switch_move(&self, expected: u64) -> Result<ShardMap, MapError> {
        self.expect(expected)?;
        let m = self.moving.as_ref().ok_or(MapError::NoMove)?;
        let mut next = self.clone();
        match &m.keyspace {
            None => next.default = m.switched(&self.default),
            Some(name) => {
                if let Some(p) = next.keyspaces.get_mut(name) {
                    *p = m.switched(p);
                }
            }
        }
        next.finishing = next.moving.take();
        next.moved += 1;
        next.epoch += 1;
        next.validate()?;
        Ok(next)
    }

    /// The map with the move in flight cancelled (nothing changes owner),
    /// at the next epoch.
    pub fn cancel_move(&self, expected: u64) -> Result<ShardMap, MapError> {
        self.expect(expected)?;
        self.moving.as_ref().ok_or(MapError::NoMove)?;
        let mut next = self.clone();
        next.moving = None;
        next.epoch += 1;
        Ok(next)
    }

    /// The map with the last move switched finished (its target holds the
    /// keys, its source deleted them), at the next epoch: a move may begin
    /// again.
    pub fn finish_move(&self, expected: u64) -> Result<ShardMap, MapError> {
        self.expect(expected)?;
        self.finishing.as_ref().ok_or(MapError::NoMove)?;
        let mut next = self.clone();
        next.finishing = None;
        next.epoch += 1;
        Ok(next)
    }

    /// The map without `shard`, which must own no key and take part in no
    /// move, at the next epoch.
    pub fn drop_shard(&self, expected: u64, shard: ShardId) -> Result<ShardMap, MapError> {
        self.expect(expected)?;
        if !self.shards.contains_key(&shard) {
            return Err(MapError::ShardNotEmpty {
                shard,
                why: "the map does not list it".into(),
            });
        }
        if let Some(what) = self.owned_by(shard) {
            return Err(MapError::ShardNotEmpty { shard, why: what });
        }
        let mut next = self.clone();
        next.shards.remove(&shard);
        next.epoch += 1;
        next.validate()?;
        Ok(next)
    }

    /// What `shard` still owns or moves, if anything: the first placement
    /// naming it, or the move in flight or finishing.
    pub(crate) fn owned_by(&self, shard: ShardId) -> Option<String> {
        let part = |m: &Option<Move>| m.as_ref().is_some_and(|m| m.from == shard || m.to == shard);
        if part(&self.finishing) {
            return Some("it takes part in the move finishing".into());
        }
        self.keys_of(shard)
    }

    /// Which keys `shard` owns or moves in this map, if any: the first
    /// placement naming it, or the move in flight (a move finishing has
    /// given its keys to its target already, so a map that drops its
    /// source later does not take them from anyone).
    pub(crate) fn keys_of(&self, shard: ShardId) -> Option<String> {
        let part = |m: &Option<Move>| m.as_ref().is_some_and(|m| m.from == shard || m.to == shard);
        if part(&self.moving) {
            return Some("it takes part in the move in flight".into());
        }
        if self.default.shards().contains(&shard) {
            return Some("it owns keys of the default placement".into());
        }
        self.keyspaces
            .iter()
            .find(|(_, p)| p.shards().contains(&shard))
            .map(|(name, _)| format!("it owns keys of keyspace {name}"))
    }

    fn expect(&self, expected: u64) -> Result<(), MapError> {
        if expected != self.epoch {
            return Err(MapError::StaleEpoch {
                expected,
                actual: self.epoch,
            });
        }
        Ok(())
    }

    /// Whether the step from this map to `next` (of the next epoch) is one
    /// of the moves' ([`ShardMap::begin_move`], [`ShardMap::switch_move`],
    /// [`ShardMap::cancel_move`], [`ShardMap::finish_move`],
    /// [`ShardMap::drop_shard`]): `None` if it
    /// is none of them (the other rules apply), else whether it is sound.
    pub(crate) fn check_move_step(&self, next: &ShardMap) -> Option<Result<(), MapError>> {
        let moved_keys = |what: &str| {
            Some(Err(MapError::MovesKeys {
                what: what.to_owned(),
            }))
        };
        if self.moving.is_none() && next.moving.is_none() && self.finishing != next.finishing {
            // A move finished.
            return Some(match (&self.finishing, &next.finishing) {
                (Some(_), None) if next.moved == self.moved && self.same_owners(next) => Ok(()),
                _ => Err(MapError::MovesKeys {
                    what: "the finishing move changes".into(),
                }),
            });
        }
        match (&self.moving, &next.moving) {
            (None, Some(m)) => {
                if self.finishing.is_some() || next.finishing.is_some() {
                    return moved_keys("a move began while the last one is finishing");
                }
                if next.moved != self.moved || !self.same_owners(next) {
                    return moved_keys("a move began and keys changed owner at once");
                }
                Some(m.validate(self))
            }
            (Some(m), None) if next.moved == self.moved + 1 => {
                let want = self.switch_move(self.epoch).ok()?;
                if !want.same_owners(next) || next.finishing != want.finishing {
                    return moved_keys(&format!("the switch of {m} gives other keys away"));
                }
                Some(Ok(()))
            }
            (Some(_), None)
                if next.moved == self.moved
                    && self.same_owners(next)
                    && next.finishing == self.finishing =>
            {
                Some(Ok(()))
            }
            (Some(a), Some(b)) if a != b => moved_keys("the move in flight changes"),
            _ if next.moved != self.moved => moved_keys("keys moved without a move"),
            _ => None,
        }
    }

    /// Whether `next` places every key as this map does (the shards it
    /// drops owning nothing here).
    fn same_owners(&self, next: &ShardMap) -> bool {
        next.default == self.default && next.keyspaces == self.keyspaces
    }
}
