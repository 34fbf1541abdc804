//! The shard map's byte format: how the directory stores it and how it
//! travels to replicas and clients.
//!
//! ```text
//! map        = version(1) cluster:varint epoch:varint
//!              count:varint { shard:varint count:varint { replica:varint client:bytes peer:bytes } }
//!              placement
//!              count:varint { name:bytes placement }
//!              count:varint { replica:varint client:bytes peer:bytes }   (version 2: the directory)
//!              moved:varint (0 | 1 move | 2 move)                         (version 3: moves;
//!                                                           1: in flight, 2: finishing)
//! move       = (0 | 1 keyspace:bytes) keys from:varint to:varint
//! keys       = 0 first_slot:varint end_slot:varint
//!            | 1 first_key:bytes (0 | 1 end_key:bytes)
//!            | 2
//! placement  = 0 shard:varint
//!            | 1 count:varint { first_slot:varint shard:varint }
//!            | 2 count:varint { first_key:bytes shard:varint }
//! bytes      = len:varint byte*
//! ```
//!
//! Versions 1 (a map without its directory's members) and 2 (without
//! moves) still decode, with no directory and no moves. Decoding is bounded by the input (the one [`Reader`]) and ends with
//! [`ShardMap::validate`]: what decodes is a valid map.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes};
use creek_types::{DecodeError, Reader, Writer};

use crate::{Endpoint, MapError, Move, MoveKeys, Placement, Shard, ShardId, ShardMap};

const VERSION: u8 = 3;
/// The first format, without the directory's members.
const VERSION_1: u8 = 1;
/// The second, without moves.
const VERSION_2: u8 = 2;
const SLOT_RANGE: u8 = 0;
const KEY_RANGE: u8 = 1;
const ALL_KEYS: u8 = 2;
const PINNED: u8 = 0;
const HASHED: u8 = 1;
const RANGES: u8 = 2;

/// Why bytes are not a shard map.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapDecodeError {
    /// The bytes do not decode.
    #[error("shard map: {0}")]
    Decode(#[from] DecodeError),
    /// A version this build does not read.
    #[error("shard map: unknown format version {0}")]
    Version(u8),
    /// A placement tag names no placement.
    #[error("shard map: unknown placement tag {tag} at byte {offset}")]
    Placement {
        /// The tag.
        tag: u8,
        /// Where it is.
        offset: usize,
    },
    /// A number is out of its range, or a name is not UTF-8.
    #[error("shard map: {what} at byte {offset} is out of range")]
    Range {
        /// Which field.
        what: &'static str,
        /// Where it is.
        offset: usize,
    },
    /// A shard, a replica of a shard, or a keyspace listed twice.
    #[error("shard map: {what} at byte {offset} is listed twice")]
    Repeated {
        /// Which field.
        what: &'static str,
        /// Where the second listing is.
        offset: usize,
    },
    /// It decodes, but is not a valid map.
    #[error("shard map: {0}")]
    Invalid(#[from] MapError),
}

/// The encoded map.
pub fn encode(map: &ShardMap) -> Bytes {
    let mut out = Vec::new();
    out.put_u8(VERSION);
    out.put_varint(map.cluster);
    out.put_varint(map.epoch);
    out.put_len(map.shards.len());
    for (id, shard) in &map.shards {
        out.put_varint(u64::from(id.0));
        put_replicas(&mut out, shard);
    }
    put_placement(&mut out, &map.default);
    out.put_len(map.keyspaces.len());
    for (name, p) in &map.keyspaces {
        out.put_prefixed(name.as_bytes());
        put_placement(&mut out, p);
    }
    put_replicas(&mut out, &map.directory);
    out.put_varint(map.moved);
    match (&map.moving, &map.finishing) {
        (Some(m), _) => {
            out.put_u8(1);
            put_move(&mut out, m);
        }
        (None, Some(m)) => {
            out.put_u8(2);
            put_move(&mut out, m);
        }
        (None, None) => out.put_u8(0),
    }
    Bytes::from(out)
}

fn put_option(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => out.put_u8(0),
        Some(b) => {
            out.put_u8(1);
            out.put_prefixed(b);
        }
    }
}

fn put_move(out: &mut Vec<u8>, m: &Move) {
    put_option(out, m.keyspace.as_deref().map(str::as_bytes));
    match &m.keys {
        MoveKeys::Slots { first, end } => {
            out.put_u8(SLOT_RANGE);
            out.put_varint(u64::from(*first));
            out.put_varint(u64::from(*end));
        }
        MoveKeys::Range { first, end } => {
            out.put_u8(KEY_RANGE);
            out.put_prefixed(first);
            put_option(out, end.as_deref());
        }
        MoveKeys::All => out.put_u8(ALL_KEYS),
    }
    out.put_varint(u64::from(m.from.0));
    out.put_varint(u64::from(m.to.0));
}

fn put_replicas(out: &mut Vec<u8>, shard: &Shard) {
    out.put_len(shard.replicas.len());
    for (replica, e) in &shard.replicas {
        out.put_varint(u64::from(*replica));
        out.put_prefixed(e.client.as_bytes());
        out.put_prefixed(e.peer.as_bytes());
    }
}

fn put_placement(out: &mut Vec<u8>, p: &Placement) {
    match p {
        Placement::Pinned(s) => {
            out.put_u8(PINNED);
            out.put_varint(u64::from(s.0));
        }
        Placement::Hashed(slots) => {
            out.put_u8(HASHED);
            out.put_len(slots.len());
            for (first, s) in slots {
                out.put_varint(u64::from(*first));
                out.put_varint(u64::from(s.0));
            }
        }
        Placement::Ranges(ranges) => {
            out.put_u8(RANGES);
            out.put_len(ranges.len());
            for (first, s) in ranges {
                out.put_prefixed(first);
                out.put_varint(u64::from(s.0));
            }
        }
    }
}

/// A map from its bytes: decoded, then validated.
pub fn decode(bytes: &Bytes) -> Result<ShardMap, MapDecodeError> {
    let mut r = Reader::shared(bytes);
    let version = r.byte()?;
    if ![VERSION, VERSION_2, VERSION_1].contains(&version) {
        return Err(MapDecodeError::Version(version));
    }
    let cluster = r.varint()?;
    let epoch = r.varint()?;
    // A shard takes at least two bytes (its id and its replica count).
    let n = r.count(2)?;
    let mut shards = BTreeMap::new();
    for _ in 0..n {
        let at = r.pos();
        let id = ShardId(u16_of(&mut r, "a shard id")?);
        if shards.insert(id, replicas(&mut r)?).is_some() {
            return Err(repeated("a shard id", at));
        }
    }
    let default = placement(&mut r)?;
    // A keyspace takes at least three bytes (a name length, a tag, a shard).
    let k = r.count(3)?;
    let mut keyspaces = BTreeMap::new();
    for _ in 0..k {
        let at = r.pos();
        let name = text(&mut r, "a keyspace name")?;
        if keyspaces.insert(name, placement(&mut r)?).is_some() {
            return Err(repeated("a keyspace name", at));
        }
    }
    let directory = if version == VERSION_1 {
        Shard::default()
    } else {
        replicas(&mut r)?
    };
    let (moved, moving, finishing) = if version == VERSION {
        let moved = r.varint()?;
        let offset = r.pos();
        match r.byte()? {
            0 => (moved, None, None),
            1 => (moved, Some(read_move(&mut r)?), None),
            2 => (moved, None, Some(read_move(&mut r)?)),
            _ => {
                return Err(MapDecodeError::Range {
                    what: "a move's state",
                    offset,
                })
            }
        }
    } else {
        (0, None, None)
    };
    r.finish()?;
    let map = ShardMap {
        cluster,
        epoch,
        shards,
        default,
        keyspaces,
        directory,
        moving,
        finishing,
        moved,
    };
    map.validate()?;
    Ok(map)
}

/// A group's replicas.
fn replicas(r: &mut Reader<'_>) -> Result<Shard, MapDecodeError> {
    // A replica takes at least three bytes (its id, two lengths).
    let m = r.count(3)?;
    let mut replicas = BTreeMap::new();
    for _ in 0..m {
        let at = r.pos();
        let replica = u16_of(r, "a replica id")?;
        let client = text(r, "a client address")?;
        let peer = text(r, "a peer address")?;
        if replicas
            .insert(replica, Endpoint { client, peer })
            .is_some()
        {
            return Err(repeated("a replica id", at));
        }
    }
    Ok(Shard { replicas })
}

fn placement(r: &mut Reader<'_>) -> Result<Placement, MapDecodeError> {
    let offset = r.pos();
    match r.byte()? {
        PINNED => Ok(Placement::Pinned(ShardId(u16_of(r, "a shard id")?))),
        HASHED => {
            let n = r.count(2)?;
            let mut slots = Vec::with_capacity(n);
            for _ in 0..n {
                let first = u16_of(r, "a slot")?;
                slots.push((first, ShardId(u16_of(r, "a shard id")?)));
            }
            Ok(Placement::Hashed(slots))
        }
        RANGES => {
            let n = r.count(2)?;
            let mut ranges = Vec::with_capacity(n);
            for _ in 0..n {
                let first = r.bytes()?;
                ranges.push((first, ShardId(u16_of(r, "a shard id")?)));
            }
            Ok(Placement::Ranges(ranges))
        }
        tag => Err(MapDecodeError::Placement { tag, offset }),
    }
}

/// A flag byte, then `read`'s value if it is 1.
fn option<T>(
    r: &mut Reader<'_>,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, MapDecodeError>,
) -> Result<Option<T>, MapDecodeError> {
    let offset = r.pos();
    match r.byte()? {
        0 => Ok(None),
        1 => read(r).map(Some),
        _ => Err(MapDecodeError::Range {
            what: "a presence flag",
            offset,
        }),
    }
}

fn read_move(r: &mut Reader<'_>) -> Result<Move, MapDecodeError> {
    let keyspace = option(r, |r| text(r, "a keyspace name"))?;
    let offset = r.pos();
    let keys = match r.byte()? {
        SLOT_RANGE => MoveKeys::Slots {
            first: u16_of(r, "a slot")?,
            end: u16_of(r, "a slot")?,
        },
        KEY_RANGE => MoveKeys::Range {
            first: r.bytes()?,
            end: option(r, |r| Ok(r.bytes()?))?,
        },
        ALL_KEYS => MoveKeys::All,
        tag => return Err(MapDecodeError::Placement { tag, offset }),
    };
    Ok(Move {
        keyspace,
        keys,
        from: ShardId(u16_of(r, "a shard id")?),
        to: ShardId(u16_of(r, "a shard id")?),
    })
}

fn repeated(what: &'static str, offset: usize) -> MapDecodeError {
    MapDecodeError::Repeated { what, offset }
}

fn u16_of(r: &mut Reader<'_>, what: &'static str) -> Result<u16, MapDecodeError> {
    let offset = r.pos();
    u16::try_from(r.varint()?).map_err(|_| MapDecodeError::Range { what, offset })
}

fn text(r: &mut Reader<'_>, what: &'static str) -> Result<String, MapDecodeError> {
    let offset = r.pos();
    let b = r.bytes()?;
    String::from_utf8(b.to_vec()).map_err(|_| MapDecodeError::Range { what, offset })
}
