//! Which keys a shard owns, as its own replicated state says
//! (docs/shards.md, "Ownership at execution").
//!
//! A shard keeps the map it executes under in its state once its keys
//! can change owner: [`MAP_KEY`] holds the shard's id (2 bytes, big-endian)
//! and the encoded map, written by one strong op at one point of the
//! shard's order. Every execution reads it like any other key (so one
//! that ran before a change runs again after it), and an execution that
//! read or wrote a data key the map gives another shard aborts with
//! [`WRONG_SHARD`], identically on every replica. The abort is not
//! recorded in the shard's session table: the request was applied
//! nowhere, and its retry on the owner is its first execution. A shard
//! whose state holds no map checks nothing here: its keys never changed
//! owner, and the check as calls are invoked is enough.
//!
//! Which key a stored key is placed by ([`placed_key`]) follows the
//! layouts of the built-in data: plain `kv.*` keys as they are, lists,
//! sets and queues by their name, keyspace data by the key within its
//! keyspace; Creek's own tables (sessions, definitions, users, MPO
//! records, this map) belong to every shard and are never checked.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::{BufMut, Bytes, BytesMut};
use creek_exec::txn::{Abort, Executed, SnapshotRead, Txn};
use creek_shard::{ShardId, ShardMap};

use crate::keyspace::DATA_PREFIX;
use crate::registry::INTERNAL_KEY_PREFIX;

/// The first bytes of every key of the session table.
const SESSIONS_PREFIX: &[u8] = b"\0sessions/";

/// Where a shard keeps the map it executes under, after its own id.
pub const MAP_KEY: &[u8] = b"\0owned/map";

/// The first word of an execution's abort on a key its shard does not
/// own; the message goes on as the invoke check's does.
pub const WRONG_SHARD: &str = "WRONG_SHARD";

/// The value of [`MAP_KEY`] for shard `me` under `map`.
pub fn encode_owned(me: ShardId, map: &ShardMap) -> Bytes {
    let encoded = creek_shard::encode(map);
    let mut out = BytesMut::with_capacity(2 + encoded.len());
    out.put_u16(me.0);
    out.put_slice(&encoded);
    out.freeze()
}

/// The key `stored` is placed by: its keyspace (`None`: the built-in
/// data's placement) and the key within it; `None` for Creek's own tables,
/// which every shard keeps.
pub fn placed_key(stored: &[u8]) -> Option<(Option<&str>, &[u8])> {
    let Some((&first, rest)) = stored.split_first() else {
        return Some((None, stored));
    };
    if first != INTERNAL_KEY_PREFIX {
        return Some((None, stored));
    }
    if let Some(data) = stored.strip_prefix(DATA_PREFIX) {
        let end = data.iter().position(|b| *b == 0)?;
        let name = std::str::from_utf8(&data[..end]).ok()?;
        return Some((Some(name), &data[end + 1..]));
    }
    // A collection's kind byte, then its name. The session table shares
    // a set's first byte (a set named `essions/…` would be stored among
    // its records: set names must not start so).
    if stored.starts_with(SESSIONS_PREFIX) {
        return None;
    }
    let (&kind, name) = rest.split_first()?;
    match kind {
        b'l' | b's' | b'q' => Some((None, name)),
        b'Q' => {
            let (len, after) = name.split_first_chunk::<2>()?;
            let len = usize::from(u16::from_be_bytes(*len));
            after.get(..len).map(|name| (None, name))
        }
        _ => None,
    }
}

/// The map a shard executes under, decoded.
#[derive(Debug)]
pub(crate) struct Owned {
    me: ShardId,
    map: Arc<ShardMap>,
}

/// The last map decoded, by its stored bytes: every execution reads it,
/// and it changes only when keys move.
#[derive(Debug, Default)]
pub(crate) struct DecodedMap(Mutex<Option<(Bytes, Arc<ShardMap>)>>);

impl DecodedMap {
    fn get(&self, stored: &Bytes) -> Option<Arc<ShardMap>> {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((bytes, map)) = &*last {
            if bytes == stored {
                return Some(Arc::clone(map));
            }
        }
        let map = Arc::new(creek_shard::decode(stored).ok()?);
        *last = Some((stored.clone(), Arc::clone(&map)));
        Some(map)
    }
}

/// The map this shard executes under, read in `txn` (recorded); `None` if
/// its state holds none (or one that does not decode, which only a bug
/// writes: then nothing is checked, as before any move).
pub(crate) fn read(decoded: &DecodedMap, txn: &mut Txn<'_>) -> Option<Owned> {
    let (me, map) = split_owned(&txn.get(MAP_KEY)?)?;
    let map = decoded.get(&map)?;
    Some(Owned { me, map })
}

/// The shard id and the encoded map a value of [`MAP_KEY`] holds.
pub fn split_owned(stored: &Bytes) -> Option<(ShardId, Bytes)> {
    let me = ShardId(u16::from_be_bytes(*stored.first_chunk::<2>()?));
    Some((me, stored.slice(2..)))
}

/// The refusal of `name`'s part of an operation across shards at this
/// shard, if the map in `snapshot` (the shard's state at the operation's
/// position) gives one of the part's keys or write-only prefixes (placed
/// by the prefix itself) another shard. Every involved shard sends its
/// verdict to the others and all follow the same, so the operation is
/// refused on every shard or on none.
pub(crate) fn refuse_part(
    snapshot: &dyn SnapshotRead,
    name: &str,
    keys: &[Bytes],
    prefixes: &[Bytes],
) -> Option<Abort> {
    let (me, map) = split_owned(&snapshot.read(MAP_KEY).0?)?;
    let owned = Owned {
        me,
        map: Arc::new(creek_shard::decode(&map).ok()?),
    };
    owned.check_keys(name, keys.iter().chain(prefixes)).err()
}

impl Owned {
    /// Refuse `executed` of procedure `name` if it read or wrote a data key
    /// another shard owns.
    pub(crate) fn check(&self, name: &str, executed: &Executed) -> Result<(), Abort> {
        let keys = executed
            .reads
            .iter()
            .map(|(k, _)| k)
            .chain(executed.writes.iter().map(|(k, _)| k));
        self.check_keys(name, keys)
    }

    fn check_keys<'a>(
        &self,
        name: &str,
        keys: impl Iterator<Item = &'a Bytes>,
    ) -> Result<(), Abort> {
        for stored in keys {
            let Some((keyspace, key)) = placed_key(stored) else {
                continue;
            };
            let owner = self.map.owner(keyspace, key);
            if owner != self.me {
                return Err(Abort::new(format!(
                    "{WRONG_SHARD}: {name} on key {:?} goes to another shard: shard {} owns it \
                     (map epoch {}); this replica serves shard {}",
                    String::from_utf8_lossy(key),
                    owner.0,
                    self.map.epoch,
                    self.me.0
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::registry::{execute_call, Registry};
    use creek_exec::basic::MapSnapshot;
    use creek_exec::txn::TxnLimits;
    use creek_types::value::{encode_args, Value};
    use creek_types::{ClientRequestId, ProcCall};

    fn call(name: &str, args: &[&str], seq: u64) -> ProcCall {
        let args: Vec<Value> = args.iter().map(|a| Value::from(*a)).collect();
        let mut call = ProcCall::new(name, encode_args(&args));
        call.request_id = Some(ClientRequestId { client: 7, seq });
        call
    }

    /// A key of `map` that `shard` owns, made from `stem`.
    fn key_of(map: &ShardMap, shard: u16, stem: &str) -> String {
        (0..)
            .map(|n| format!("{stem}{n}"))
            .find(|k| map.owner(None, k.as_bytes()) == ShardId(shard))
            .unwrap()
    }

    /// With a map in its state, a shard runs calls on its own keys and
    /// refuses, unrecorded and writing nothing, reads and writes of
    /// another shard's; without one it checks nothing.
    #[test]
    fn an_execution_on_another_shards_key_aborts_unrecorded() {
        let map = ShardMap::hashed(9, &[ShardId(0), ShardId(1)]);
        let (mine, theirs) = (key_of(&map, 0, "m"), key_of(&map, 1, "t"));
        let registry = Registry::with_builtins();
        let run = |state: &MapSnapshot, c: &ProcCall| {
            execute_call(&registry, state, TxnLimits::default(), c)
        };
        let mut state = MapSnapshot::default();
        state
            .0
            .insert(Bytes::from_static(MAP_KEY), encode_owned(ShardId(0), &map));

        let put = run(&state, &call("kv.put", &[&mine, "v"], 1));
        assert!(put.outcome.is_ok(), "{:?}", put.outcome);
        assert!(put.writes.iter().any(|(k, _)| k == mine.as_bytes()));
        assert!(
            put.reads.iter().any(|(k, _)| k == MAP_KEY),
            "the map is read"
        );

        for c in [
            call("kv.put", &[&theirs, "v"], 2),
            call("kv.get", &[&theirs], 3),
        ] {
            let refused = run(&state, &c);
            let abort = refused.outcome.unwrap_err().0;
            assert!(abort.starts_with("WRONG_SHARD: "), "{abort}");
            assert!(abort.contains("shard 1 owns it (map epoch 1)"), "{abort}");
            assert!(
                refused.writes.is_empty(),
                "nothing written, the session included"
            );
        }

        let unchecked = run(&MapSnapshot::default(), &call("kv.put", &[&theirs, "v"], 4));
        assert!(unchecked.outcome.is_ok());
    }

    #[test]
    fn stored_keys_are_placed_by_their_data_key() {
        assert_eq!(placed_key(b"user1"), Some((None, &b"user1"[..])));
        assert_eq!(placed_key(b""), Some((None, &b""[..])));
        let ks = crate::keyspace::data_key("orders", b"o1");
        assert_eq!(placed_key(&ks), Some((Some("orders"), &b"o1"[..])));
        assert_eq!(placed_key(b"\0llist"), Some((None, &b"list"[..])));
        assert_eq!(placed_key(b"\0sset"), Some((None, &b"set"[..])));
        assert_eq!(placed_key(b"\0qjobs"), Some((None, &b"jobs"[..])));
        let mut item = b"\0Q\0\x04jobs".to_vec();
        item.extend_from_slice(&7u64.to_be_bytes());
        assert_eq!(placed_key(&item), Some((None, &b"jobs"[..])));
        for own in [
            &b"\0sessions/horizon"[..],
            b"\0dedup/x",
            b"\0mpo/seq",
            b"\0ksdef/orders",
            b"\0auth/user/a",
            b"\0proc/p",
            MAP_KEY,
        ] {
            assert_eq!(placed_key(own), None, "{own:?}");
        }
    }
}
