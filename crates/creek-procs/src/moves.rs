//! The ops a shard orders while keys move to it or from it
//! (docs/shards.md, "Moving keys between shards"), the copy's pages
//! ([`copy`]) and the mover that drives a move ([`mover`]).
//!
//! [`IMPORT`] installs one chunk of a move's keys at the shard they go to:
//! values copied from the shard they leave, and keys deleted there since
//! an earlier chunk. It is a strong internal op of the target's own log,
//! so every target replica holds the same copy at the same point of its
//! order. With its first chunk the target writes the map of the move into
//! its state (`crate::ownership`): from that point its executions refuse
//! the moving keys until the move switches, whatever map a replica has
//! learnt meanwhile. An import is itself exempt from that check (it writes
//! keys its shard does not own yet), and checks instead that every key it
//! writes is one of the move's and that its shard is the move's target.
//!
//! Every import carries its mover's **fence** `(term, n)`: the term of the
//! mover (a new mover of the same move takes a higher one) and the chunk's
//! number in that term, 1, 2, 3, …. The target keeps the last fence it
//! installed ([`FENCE_KEY`]) and refuses a chunk of an older term, or out
//! of turn: a mover that lost its place (a leader that was replaced) can
//! never install a stale chunk over a newer mover's copy.
//!
//! [`ADOPT`] makes a shard execute under a later map: the source adopts
//! the switched map (from that point it refuses the moved keys: its
//! **release**), the target adopts it once its copy is exact (only under
//! the fence of the mover's last chunk, so nothing was installed since the
//! mover compared), and either deletes keys it does not own under it (the
//! source's clean-up, a cancelled move's copy at the target).

use bytes::Bytes;
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_shard::{ShardId, ShardMap};
use creek_types::value::{decode_args, encode_args, Value};
use creek_types::ProcCall;

use crate::ownership::{encode_owned, placed_key, split_owned, MAP_KEY};
use crate::registry::Registry;

pub mod copy;
pub mod mover;

/// The procedure that installs a chunk of a move's keys at their target.
/// Internal: only a mover invokes it.
pub const IMPORT: &str = "creek.move.import";

/// The procedure that makes a shard execute under a later map (and
/// deletes keys it does not own under it). Internal: only a mover invokes
/// it.
pub const ADOPT: &str = "creek.move.adopt";

/// Where a target keeps the fence of the last chunk it installed: the
/// mover's term and the chunk's number, 8 bytes big-endian each.
pub const FENCE_KEY: &[u8] = b"\0owned/fence";

/// A mover's term and the number of one of its chunks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fence {
    /// The mover's term: a later mover of a move takes a higher one.
    pub term: u64,
    /// The chunk's number in its term, from 1.
    pub n: u64,
}

impl Fence {
    fn encode(self) -> Bytes {
        let mut out = Vec::with_capacity(16);
        out.extend_from_slice(&self.term.to_be_bytes());
        out.extend_from_slice(&self.n.to_be_bytes());
        out.into()
    }

    /// The fence a target's state holds (`None`: it installed no chunk).
    pub fn decode(raw: &[u8]) -> Option<Fence> {
        let (term, n) = raw.split_first_chunk::<8>()?;
        let n = n.first_chunk::<8>()?;
        Some(Fence {
            term: u64::from_be_bytes(*term),
            n: u64::from_be_bytes(*n),
        })
    }
}

/// One chunk of a move's keys for the target to install.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    /// Keys and the values copied from the source.
    pub puts: Vec<(Bytes, Bytes)>,
    /// Keys the source no longer holds.
    pub deletes: Vec<Bytes>,
}

impl Chunk {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.puts.is_empty() && self.deletes.is_empty()
    }

    /// Its keys' and values' bytes.
    pub fn bytes(&self) -> usize {
        let puts: usize = self.puts.iter().map(|(k, v)| k.len() + v.len()).sum();
        puts + self.deletes.iter().map(Bytes::len).sum::<usize>()
    }
}

fn int(n: u64) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

fn strong(name: &str, args: &[Value]) -> ProcCall {
    let mut call = ProcCall::new(name, encode_args(args));
    call.strong = true;
    call
}

/// An [`IMPORT`] call: shard `me` installs `chunk` of the move `map` holds
/// in flight, under `fence` (a strong op).
pub fn import_call(me: ShardId, map: &ShardMap, fence: Fence, chunk: &Chunk) -> ProcCall {
    let puts = chunk
        .puts
        .iter()
        .map(|(k, v)| Value::List(vec![Value::Bytes(k.clone()), Value::Bytes(v.clone())]))
        .collect();
    let deletes = chunk.deletes.iter().cloned().map(Value::Bytes).collect();
    strong(
        IMPORT,
        &[
            Value::Int(i64::from(me.0)),
            Value::Bytes(creek_shard::encode(map)),
            int(fence.term),
            int(fence.n),
            Value::List(puts),
            Value::List(deletes),
        ],
    )
}

/// An [`ADOPT`] call: shard `me` executes under `map` from its place in
/// the order on, and deletes `deletes` (keys `map` gives another shard);
/// with `fence`, only if its last installed chunk is that one.
pub fn adopt_call(
    me: ShardId,
    map: &ShardMap,
    fence: Option<Fence>,
    deletes: &[Bytes],
) -> ProcCall {
    let fence = match fence {
        Some(f) => Value::List(vec![int(f.term), int(f.n)]),
        None => Value::Nil,
    };
    strong(
        ADOPT,
        &[
            Value::Int(i64::from(me.0)),
            Value::Bytes(creek_shard::encode(map)),
            fence,
            Value::List(deletes.iter().cloned().map(Value::Bytes).collect()),
        ],
    )
}

/// In the abort of a chunk refused by its fence: another mover took the
/// move over.
pub const FENCED: &str = "fenced";

/// In the abort of a move's op at a shard already executing under a later
/// map than the op's.
pub const PAST: &str = "executes under map epoch";

fn malformed(sig: &str) -> String {
    format!("malformed arguments: expected ({sig})")
}

fn shard_arg(v: &Value, sig: &str) -> Result<ShardId, String> {
    match v {
        Value::Int(me) => u16::try_from(*me).map(ShardId).map_err(|_| malformed(sig)),
        _ => Err(malformed(sig)),
    }
}

fn count(v: &Value, sig: &str) -> Result<u64, String> {
    match v {
        Value::Int(n) => u64::try_from(*n).map_err(|_| malformed(sig)),
        _ => Err(malformed(sig)),
    }
}

fn keys(v: &[Value], sig: &str) -> Result<Vec<Bytes>, String> {
    v.iter()
        .map(|k| match k {
            Value::Bytes(k) => Ok(k.clone()),
            _ => Err(malformed(sig)),
        })
        .collect()
}

/// What an [`IMPORT`] call carries.
struct Import {
    me: ShardId,
    map: ShardMap,
    fence: Fence,
    chunk: Chunk,
}

const IMPORT_SIG: &str =
    "shard: int, map: bytes, term: int, n: int, puts: [[key, value]], deletes: [key]";

fn decode_import(args: &[u8]) -> Result<Import, String> {
    let values = decode_args(args).map_err(|e| format!("malformed arguments: {e}"))?;
    let [me, Value::Bytes(map_bytes), term, n, Value::List(puts), Value::List(deletes)] =
        values.as_slice()
    else {
        return Err(malformed(IMPORT_SIG));
    };
    let map = creek_shard::decode(map_bytes).map_err(|e| e.to_string())?;
    let puts = puts
        .iter()
        .map(|pair| match pair {
            Value::List(kv) => match kv.as_slice() {
                [Value::Bytes(k), Value::Bytes(v)] => Ok((k.clone(), v.clone())),
                _ => Err(malformed(IMPORT_SIG)),
            },
            _ => Err(malformed(IMPORT_SIG)),
        })
        .collect::<Result<_, _>>()?;
    Ok(Import {
        me: shard_arg(me, IMPORT_SIG)?,
        map,
        fence: Fence {
            term: count(term, IMPORT_SIG)?,
            n: count(n, IMPORT_SIG)?,
        },
        chunk: Chunk {
            puts,
            deletes: keys(deletes, IMPORT_SIG)?,
        },
    })
}

/// The shard id and map a shard's state holds, if any.
fn held(txn: &mut Txn<'_>) -> Option<(ShardId, ShardMap)> {
    let (me, map) = split_owned(&txn.get(MAP_KEY)?)?;
    Some((me, creek_shard::decode(&map).ok()?))
}

fn import(txn: &mut Txn<'_>, args: &Bytes) -> Outcome {
    let fail = |why: String| Abort(format!("{IMPORT}: {why}"));
    let Import {
        me,
        map,
        fence,
        chunk,
    } = decode_import(args).map_err(fail)?;
    // A map with the move in flight (the copy's rounds), or switched and
    // finishing (the round after the source's release).
    let (m, in_flight) = match (&map.moving, &map.finishing) {
        (Some(m), _) => (m, true),
        (None, Some(m)) => (m, false),
        (None, None) => return Err(fail(format!("the map (epoch {}) holds no move", map.epoch))),
    };
    if m.to != me {
        return Err(fail(format!("{m}: shard {} is not its target", me.0)));
    }
    // A chunk of a move this shard's state has moved past (it adopted the
    // switched map, or a later one) changes nothing.
    let held = held(txn);
    let held_epoch = held.as_ref().map(|(_, h)| h.epoch);
    if let Some((_, h)) = held
        .as_ref()
        .filter(|(_, h)| h.epoch > map.epoch || (!in_flight && h.epoch == map.epoch))
    {
        return Err(fail(format!(
            "the shard {PAST} {}, after the move's {}",
            h.epoch, map.epoch
        )));
    }
    // After the switch, only a target that began the move (and so refuses
    // its keys) takes chunks: it adopts the switched map once exact.
    if !in_flight {
        match &held {
            Some((_, h)) if h.moving.as_ref() == Some(m) => {}
            // It adopted a map with the switch already (one of a later
            // epoch than the switch's own, after a change of members).
            Some((_, h)) if h.moved >= map.moved => {
                return Err(fail(format!(
                    "the shard {PAST} {}, which has the move switched",
                    h.epoch
                )))
            }
            _ => return Err(fail(format!("{m}: the shard did not begin it"))),
        }
    }
    let last = txn.get(FENCE_KEY).and_then(|b| Fence::decode(&b));
    if last == Some(fence) {
        // Installed already (the mover sent it again, not knowing).
        return Ok(int(0).encode());
    }
    if let Some(last) = last {
        let in_turn = fence.term > last.term || (fence.term == last.term && fence.n == last.n + 1);
        if !in_turn {
            return Err(fail(format!(
                "{FENCED}: chunk {} of term {} comes after chunk {} of term {}",
                fence.n, fence.term, last.n, last.term
            )));
        }
    }
    let keys = chunk
        .puts
        .iter()
        .map(|(k, _)| k)
        .chain(chunk.deletes.iter());
    for key in keys {
        let moving = placed_key(key)
            .is_some_and(|(ks, k)| ks == m.keyspace.as_deref() && m.keys.contains(k));
        if !moving {
            return Err(fail(format!(
                "key {:?} is not among the keys of {m}",
                String::from_utf8_lossy(key)
            )));
        }
    }
    if in_flight && held_epoch != Some(map.epoch) {
        txn.put(Bytes::from_static(MAP_KEY), encode_owned(me, &map));
    }
    txn.put(Bytes::from_static(FENCE_KEY), fence.encode());
    let n = chunk.puts.len() + chunk.deletes.len();
    for (k, v) in chunk.puts {
        txn.put(k, v);
    }
    for k in chunk.deletes {
        txn.delete(k);
    }
    Ok(int(n as u64).encode())
}

/// What an [`ADOPT`] call carries.
struct Adopt {
    me: ShardId,
    map: ShardMap,
    fence: Option<Fence>,
    deletes: Vec<Bytes>,
}

const ADOPT_SIG: &str = "shard: int, map: bytes, fence: [term, n] or nil, deletes: [key]";

fn decode_adopt(args: &[u8]) -> Result<Adopt, String> {
    let values = decode_args(args).map_err(|e| format!("malformed arguments: {e}"))?;
    let [me, Value::Bytes(map_bytes), fence, Value::List(deletes)] = values.as_slice() else {
        return Err(malformed(ADOPT_SIG));
    };
    let fence = match fence {
        Value::Nil => None,
        Value::List(f) => match f.as_slice() {
            [term, n] => Some(Fence {
                term: count(term, ADOPT_SIG)?,
                n: count(n, ADOPT_SIG)?,
            }),
            _ => return Err(malformed(ADOPT_SIG)),
        },
        _ => return Err(malformed(ADOPT_SIG)),
    };
    Ok(Adopt {
        me: shard_arg(me, ADOPT_SIG)?,
        map: creek_shard::decode(map_bytes).map_err(|e| e.to_string())?,
        fence,
        deletes: keys(deletes, ADOPT_SIG)?,
    })
}

fn adopt(txn: &mut Txn<'_>, args: &Bytes) -> Outcome {
    let fail = |why: String| Abort(format!("{ADOPT}: {why}"));
    let Adopt {
        me,
        map,
        fence,
        deletes,
    } = decode_adopt(args).map_err(fail)?;
    if !map.shards.contains_key(&me) {
        return Err(fail(format!(
            "the map (epoch {}) does not list shard {}",
            map.epoch, me.0
        )));
    }
    if let Some(fence) = fence {
        let last = txn.get(FENCE_KEY).and_then(|b| Fence::decode(&b));
        if last != Some(fence) {
            return Err(fail(format!(
                "{FENCED}: the copy's last chunk is {last:?}, not the mover's {fence:?}"
            )));
        }
    }
    match held(txn) {
        Some((held_me, _)) if held_me != me => {
            return Err(fail(format!(
                "this is shard {}'s state, not shard {}'s",
                held_me.0, me.0
            )))
        }
        Some((_, h)) if h.epoch > map.epoch => {
            return Err(fail(format!(
                "the shard {PAST} {}, after {}",
                h.epoch, map.epoch
            )))
        }
        Some((_, h)) if h.epoch == map.epoch => {}
        held => {
            if let Some((_, h)) = &held {
                h.check_later(&map).map_err(|e| fail(e.to_string()))?;
            }
            txn.put(Bytes::from_static(MAP_KEY), encode_owned(me, &map));
        }
    }
    for key in &deletes {
        let foreign = placed_key(key).is_some_and(|(ks, k)| {
            let incoming = map
                .moving
                .as_ref()
                .is_some_and(|m| m.to == me && m.keyspace.as_deref() == ks && m.keys.contains(k));
            map.owner(ks, k) != me && !incoming
        });
        if !foreign {
            return Err(fail(format!(
                "key {:?} is not one map epoch {} gives another shard",
                String::from_utf8_lossy(key),
                map.epoch
            )));
        }
    }
    let n = deletes.len();
    for k in deletes {
        txn.delete(k);
    }
    Ok(int(n as u64).encode())
}

/// The abort of a move's op called in a weak op: it changes what a shard
/// owns, strong state.
pub(crate) fn level_violation(call: &ProcCall) -> Option<Abort> {
    (is_move_op(&call.name) && !call.strong).then(|| {
        Abort::new(format!(
            "{}: changes the keys a shard owns, strong state: invoke it at the strong level",
            call.name
        ))
    })
}

/// Whether `name` is one of the moves' own ops, which the check at
/// execution does not apply to.
pub(crate) fn is_move_op(name: &str) -> bool {
    name == IMPORT || name == ADOPT
}

/// Register [`IMPORT`] and [`ADOPT`].
pub(crate) fn register(r: &mut Registry) {
    r.register_fn(IMPORT, false, |a| decode_import(a).map(|_| ()), import);
    r.register_fn(ADOPT, false, |a| decode_adopt(a).map(|_| ()), adopt);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::registry::execute_call;
    use creek_exec::basic::MapSnapshot;
    use creek_exec::txn::{Executed, TxnLimits};
    use creek_shard::{slot_of, Move, MoveKeys};

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// A map of two shards with the slot of a key shard 0 owns moving to
    /// shard 1, and that key.
    fn moving() -> (ShardMap, String) {
        let map = ShardMap::hashed(3, &[ShardId(0), ShardId(1)]);
        let key = (0..)
            .map(|n| format!("k{n}"))
            .find(|k| map.owner(None, k.as_bytes()) == ShardId(0))
            .unwrap();
        let slot = slot_of(key.as_bytes());
        let m = Move {
            keyspace: None,
            keys: MoveKeys::Slots {
                first: slot,
                end: slot + 1,
            },
            from: ShardId(0),
            to: ShardId(1),
        };
        (map.begin_move(1, m).unwrap(), key)
    }

    fn run(state: &mut MapSnapshot, call: &ProcCall) -> Executed {
        let registry = Registry::with_builtins();
        let executed = execute_call(&registry, state, TxnLimits::default(), call);
        for (k, v) in &executed.writes {
            match v {
                Some(v) => state.0.insert(k.clone(), v.clone()),
                None => state.0.remove(k),
            };
        }
        executed
    }

    fn f(n: u64) -> Fence {
        Fence { term: 1, n }
    }

    fn abort(e: &Executed) -> String {
        e.outcome.clone().unwrap_err().0
    }

    #[test]
    fn the_target_installs_chunks_and_refuses_the_keys_until_the_switch() {
        let (map, key) = moving();
        let mut target = MapSnapshot::default();
        let chunk = Chunk {
            puts: vec![(b(&key), b("v1"))],
            deletes: Vec::new(),
        };
        let done = run(&mut target, &import_call(ShardId(1), &map, f(1), &chunk));
        assert!(done.outcome.is_ok(), "{:?}", done.outcome);
        assert_eq!(target.0.get(key.as_bytes()), Some(&b("v1")));
        // The target now executes under the move's map: the key is not its
        // own yet, and an op on it is refused, unrecorded.
        let get = ProcCall::new("kv.get", encode_args(&[Value::from(key.as_str())]));
        let refused = run(&mut target, &get);
        assert!(
            abort(&refused).starts_with("WRONG_SHARD: "),
            "{}",
            abort(&refused)
        );
        // A later chunk deletes it (the source deleted it meanwhile).
        let gone = Chunk {
            puts: Vec::new(),
            deletes: vec![b(&key)],
        };
        assert!(
            run(&mut target, &import_call(ShardId(1), &map, f(2), &gone))
                .outcome
                .is_ok()
        );
        assert_eq!(target.0.get(key.as_bytes()), None);
    }

    #[test]
    fn an_import_that_does_not_belong_is_refused_and_writes_nothing() {
        let (map, key) = moving();
        let stray = (0..)
            .map(|n| format!("s{n}"))
            .find(|k| slot_of(k.as_bytes()) != slot_of(key.as_bytes()))
            .unwrap();
        let mut target = MapSnapshot::default();
        let refused = |state: &mut MapSnapshot, call: ProcCall, why: &str| {
            let e = run(state, &call);
            assert!(abort(&e).contains(why), "{} (wanted {why})", abort(&e));
            assert!(e.writes.is_empty());
        };
        let chunk = |k: &str| Chunk {
            puts: vec![(b(k), b("v"))],
            deletes: Vec::new(),
        };
        refused(
            &mut target,
            import_call(ShardId(1), &map, f(1), &chunk(&stray)),
            "is not among the keys",
        );
        refused(
            &mut target,
            import_call(ShardId(0), &map, f(1), &chunk(&key)),
            "is not its target",
        );
        let still = ShardMap::hashed(3, &[ShardId(0), ShardId(1)]);
        refused(
            &mut target,
            import_call(ShardId(1), &still, f(1), &chunk(&key)),
            "holds no move",
        );
        let mut weak = import_call(ShardId(1), &map, f(1), &chunk(&key));
        weak.strong = false;
        refused(&mut target, weak, "strong level");
        // Past the switch, a late chunk changes nothing.
        let switched = map.switch_move(map.epoch).unwrap();
        target.0.insert(
            Bytes::from_static(MAP_KEY),
            encode_owned(ShardId(1), &switched),
        );
        refused(
            &mut target,
            import_call(ShardId(1), &map, f(1), &chunk(&key)),
            "after the move's",
        );
        assert!(!target.0.contains_key(key.as_bytes()));
    }
}
