//! Placement: which shard owns a key of one keyspace.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::{MapError, Shard, ShardId};

/// How many hash slots a hashed placement divides the keys into.
pub const SLOTS: u16 = 4096;

/// How a keyspace's keys are placed on shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Every key on one shard.
    Pinned(ShardId),
    /// By hash slot ([`slot_of`]): `(first slot, shard)` in increasing
    /// order of first slot, the first at slot 0; each shard owns the slots
    /// from its first to the next entry's.
    Hashed(Vec<(u16, ShardId)>),
    /// By key order: `(first key, shard)` in strictly increasing order of
    /// first key, the first at the empty key; each shard owns the keys from
    /// its first key up to (not including) the next entry's.
    Ranges(Vec<(Bytes, ShardId)>),
}

/// The hash slot of `key`: the CRC-32 (IEEE) of the key, or of its tag if
/// it has one, mixed by MurmurHash3's 32-bit finalizer, modulo [`SLOTS`].
/// A key's tag is what lies between its first `{` and the first `}` after
/// it, if that is not empty.
///
/// The finalizer is there because a CRC is linear: keys that differ only
/// in their last characters (`r0`…`r7`, `acct/0`…`acct/7`) have CRCs
/// whose low bits move together, and taken modulo 4096 they crowd into a
/// few slots (all of those eight on one of two shards).
pub fn slot_of(key: &[u8]) -> u16 {
    let hashed = tag(key).unwrap_or(key);
    // Lossless: the remainder is below SLOTS.
    (fmix32(crc32fast::hash(hashed)) % u32::from(SLOTS)) as u16
}

/// MurmurHash3's finalizer: every input bit moves about half the output
/// bits.
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

fn tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|b| *b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|b| *b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The first key after every key starting with `prefix`, or `None` when
/// there is none (the prefix is empty or all `0xff` bytes).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

impl Placement {
    /// Slots spread evenly over `shards`, in the order given.
    pub fn even_slots(shards: &[ShardId]) -> Placement {
        let n = shards.len().max(1);
        Placement::Hashed(
            shards
                .iter()
                .enumerate()
                // Lossless: i < n, so i * SLOTS / n < SLOTS.
                .map(|(i, s)| ((i * usize::from(SLOTS) / n) as u16, *s))
                .collect(),
        )
    }

    /// The shard that owns `key`.
    pub fn owner(&self, key: &[u8]) -> ShardId {
        match self {
            Placement::Pinned(s) => *s,
            Placement::Hashed(slots) => {
                let slot = slot_of(key);
                last_at_or_below(slots, |first| *first <= slot)
            }
            Placement::Ranges(ranges) => last_at_or_below(ranges, |first| first[..] <= *key),
        }
    }

    /// The shards that may own a key starting with `prefix`, in order: one
    /// when the placement keeps them together (pinned; hashed, with a
    /// whole `{tag}` in the prefix, which every key starting with it
    /// shares; ranges, with the keys from `prefix` to [`prefix_end`] in one
    /// shard's ranges), else every shard that may hold one.
    pub fn owners_of_prefix(&self, prefix: &[u8]) -> Vec<ShardId> {
        let mut v = match self {
            Placement::Pinned(s) => return vec![*s],
            Placement::Hashed(_) => match tag(prefix) {
                Some(_) => return vec![self.owner(prefix)],
                None => return self.shards(),
            },
            Placement::Ranges(ranges) => {
                let end = prefix_end(prefix);
                let mut v = vec![self.owner(prefix)];
                // Every range that starts inside [prefix, end).
                v.extend(
                    ranges
                        .iter()
                        .filter(|(first, _)| {
                            first[..] > *prefix && end.as_ref().is_none_or(|e| first[..] < e[..])
                        })
                        .map(|(_, s)| *s),
                );
                v
            }
        };
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Every shard this placement names, in order.
    pub fn shards(&self) -> Vec<ShardId> {
        let mut v: Vec<ShardId> = match self {
            Placement::Pinned(s) => vec![*s],
            Placement::Hashed(slots) => slots.iter().map(|(_, s)| *s).collect(),
            Placement::Ranges(ranges) => ranges.iter().map(|(_, s)| *s).collect(),
        };
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Check that it is well formed and names only shards in `shards`.
    pub(crate) fn validate(
        &self,
        what: &str,
        shards: &BTreeMap<ShardId, Shard>,
    ) -> Result<(), MapError> {
        let bad = |why: String| MapError::BadRanges {
            what: what.to_owned(),
            why,
        };
        match self {
            Placement::Pinned(_) => {}
            Placement::Hashed(slots) => {
                if slots.first().map(|(f, _)| *f) != Some(0) {
                    return Err(bad("the first slot range must start at slot 0".into()));
                }
                if let Some((f, _)) = slots.iter().find(|(f, _)| *f >= SLOTS) {
                    return Err(bad(format!("slot {f} is past the last slot {}", SLOTS - 1)));
                }
                if slots.windows(2).any(|w| w[0].0 >= w[1].0) {
                    return Err(bad("slot ranges must be in increasing order".into()));
                }
            }
            Placement::Ranges(ranges) => {
                if ranges.first().map(|(f, _)| f.is_empty()) != Some(true) {
                    return Err(bad("the first key range must start at the empty key".into()));
                }
                if ranges.windows(2).any(|w| w[0].0 >= w[1].0) {
                    return Err(bad("key ranges must be in increasing order".into()));
                }
            }
        }
        match self.shards().into_iter().find(|s| !shards.contains_key(s)) {
            Some(shard) => Err(MapError::UnknownShard {
                what: what.to_owned(),
                shard,
            }),
            None => Ok(()),
        }
    }
}

/// The shard of the last entry whose first element `at_or_below` accepts
/// (entries in increasing order; the first is accepted by every key of a
/// valid placement).
fn last_at_or_below<K>(entries: &[(K, ShardId)], at_or_below: impl Fn(&K) -> bool) -> ShardId {
    let n = entries.partition_point(|(first, _)| at_or_below(first));
    // A valid placement's first entry accepts every key; a malformed one
    // (never past `validate`) falls back to its first shard.
    entries
        .get(n.saturating_sub(1))
        .map_or(ShardId(0), |(_, s)| *s)
}
