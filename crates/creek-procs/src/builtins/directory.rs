//! `directory.*`: the shard map as the directory group's state
//! (docs/shards.md, "The directory"). Registered only by the replicas of
//! a directory group ([`register`]); a shard's replicas do not know them.
//!
//! | procedure        | arguments                    | result                      | read-only |
//! |------------------|------------------------------|-----------------------------|-----------|
//! | `directory.map`  | none                         | the map's bytes, or nil     | yes       |
//! | `directory.set`  | `expected: int, map: bytes`  | int: the new map's epoch    |           |
//! | `directory.move` | `expected: int, map: bytes`  | int: the new map's epoch    |           |
//!
//! | `mpo.sequence`   | `origin: int, seq: int, shards: list of int` | list of `[shard, index]` |        |
//! | `mpo.next`       | `shard: int, index: int`     | `[origin, seq, shards]`, or nil | yes |
//!
//! `mpo.sequence` is the sequencer of operations across shards
//! (docs/cross-shard.md): a strong op only, it gives MPO `(origin, seq)`
//! the next index of each shard it involves — per shard 1, 2, 3, … in the
//! directory's committed order, so any two MPOs sharing shards get their
//! indices in the same order on each — and answers them. Sequencing an
//! MPO again answers the indices it got. `mpo.next` answers which MPO
//! holds index `index` of shard `shard` (a shard asks when it misses one).
//!
//! `directory.set` is a strong op only. It installs `map` (the bytes of
//! `creek_shard::encode`) if the directory's map is at epoch `expected`
//! (0: the directory holds no map yet, and `map` must be at epoch 1) and
//! `map` may follow it (`creek_shard::ShardMap::check_next`: the same
//! cluster, the next epoch, no key given another owner) without a step of
//! a move of keys (those come with the data they carry); otherwise it
//! aborts with the reason and changes nothing.
//!
//! `directory.move` is `directory.set` for the steps of a move of keys
//! (docs/shards.md, "Moving keys between shards"): `map` must be exactly
//! the directory's map with one step taken — a move begun, the move in
//! flight switched or cancelled, the last one switched finished, or a
//! shard that owns nothing dropped —
//! at the next epoch. The mover of a move makes these; an operator's
//! `creek admin move` begins one.

use bytes::Bytes;

use super::{describe_all, Sig, Subject, Ty};
use crate::registry::Registry;
use crate::registry::Signature;
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_shard::ShardMap;
use creek_types::value::{decode_args, Value};
use creek_types::ProcCall;

/// Where the directory keeps the encoded map.
pub const MAP_KEY: &[u8] = b"\0dir/shard-map";

/// Name of the procedure reading the map.
pub const MAP: &str = "directory.map";
/// Name of the procedure changing it.
pub const SET: &str = "directory.set";
/// Name of the procedure taking a step of a move of keys.
pub const MOVE: &str = "directory.move";

const MAP_SIG: Sig = Sig {
    name: MAP,
    params: &[],
    subject: Subject::None,
};
const SET_SIG: Sig = Sig {
    name: SET,
    params: &[("expected", Ty::Int), ("map", Ty::Bytes)],
    subject: Subject::None,
};
const MOVE_SIG: Sig = Sig {
    name: MOVE,
    params: &[("expected", Ty::Int), ("map", Ty::Bytes)],
    subject: Subject::None,
};

/// Name of the procedure sequencing an MPO.
pub const SEQUENCE: &str = "mpo.sequence";
/// Name of the procedure reading a shard's sequence.
pub const NEXT: &str = "mpo.next";

/// Where the directory keeps the last index it gave each shard (the
/// shard, 4 bytes big-endian, after the prefix).
const SEQ_LAST: &[u8] = b"\0dir/mpo/last/";
/// Where it keeps which MPO holds each index of each shard (shard, then
/// index, 8 bytes).
const SEQ_AT: &[u8] = b"\0dir/mpo/at/";
/// Where it keeps the indices each MPO got (origin, then seq, 8 bytes
/// each).
const SEQ_OF: &[u8] = b"\0dir/mpo/of/";

/// Register the `directory.*` procedures (a directory group's replicas
/// only; every replica of the group must).
pub fn register(r: &mut Registry) {
    r.register_fn(MAP, true, |a| MAP_SIG.check(a), map);
    r.register_fn(SET, false, |a| SET_SIG.check(a), set);
    r.register_fn(MOVE, false, |a| MOVE_SIG.check(a), move_step);
    r.register_fn(SEQUENCE, false, |a| sequence_args(a).map(drop), sequence);
    r.register_fn(NEXT, true, |a| next_args(a).map(drop), next);
    r.describe(
        SEQUENCE,
        Signature::new(
            &[("origin", "int"), ("seq", "int"), ("shards", "list")],
            "list of [shard, index]",
            "Give an operation across shards the next index of each shard it involves (strong op only, internal).",
        ),
    );
    r.describe(
        NEXT,
        Signature::new(
            &[("shard", "int"), ("index", "int")],
            "[origin, seq, shards], or nil",
            "The operation across shards at an index of a shard's sequence.",
        ),
    );
    describe_all(
        r,
        &[
            (
                &MAP_SIG,
                "bytes, or nil",
                "The shard map the directory holds.",
            ),
            (
                &SET_SIG,
                "int: the new epoch",
                "Install the next shard map, made against epoch expected (strong op only, admin).",
            ),
            (
                &MOVE_SIG,
                "int: the new epoch",
                "Take a step of a move of keys: the map with a move begun, switched or cancelled, or an empty shard dropped (strong op only, admin).",
            ),
        ],
    );
}

fn map(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    MAP_SIG.args(raw)?;
    Ok(txn.get(MAP_KEY).map_or(Value::Nil, Value::Bytes).encode())
}

fn set(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = SET_SIG.args(raw)?;
    let [Value::Int(expected), Value::Bytes(bytes)] = args.as_slice() else {
        return Err(SET_SIG.mismatch());
    };
    let next = creek_shard::decode(bytes).map_err(|e| Abort(format!("{SET}: {e}")))?;
    let current = held(txn, SET)?;
    check_expected(SET, *expected, current.as_ref().map_or(0, |m| m.epoch))?;
    match &current {
        None if next.epoch != 1 || next.moving.is_some() || next.moved != 0 => {
            return Err(Abort(format!(
                "{SET}: the first map of a directory has epoch 1 and no move; this one has \
                 epoch {}",
                next.epoch
            )))
        }
        None => {}
        // A move's steps come with the data they carry, never as a bare
        // map change.
        Some(current)
            if (&current.moving, &current.finishing, current.moved)
                != (&next.moving, &next.finishing, next.moved) =>
        {
            return Err(Abort(format!(
                "{SET}: the change begins, switches or cancels a move of keys; moves are made \
                 with the data they carry (creek admin move), not set"
            )))
        }
        Some(current) => current
            .check_next(&next)
            .map_err(|e| Abort(format!("{SET}: {e}")))?,
    }
    txn.put(Bytes::from_static(MAP_KEY), bytes.clone());
    Ok(Value::Int(i64::try_from(next.epoch).unwrap_or(i64::MAX)).encode())
}

/// The directory's map, decoded (`None`: it holds none yet).
fn held(txn: &mut Txn<'_>, name: &str) -> Result<Option<ShardMap>, Abort> {
    txn.get(MAP_KEY)
        .map(|b| {
            creek_shard::decode(&b).map_err(|e| {
                Abort(format!(
                    "{name}: the directory's own map does not decode: {e}"
                ))
            })
        })
        .transpose()
}

/// The abort of a change made against another epoch than the map's.
fn check_expected(name: &str, expected: i64, epoch: u64) -> Result<(), Abort> {
    if u64::try_from(expected).ok() == Some(epoch) {
        return Ok(());
    }
    Err(Abort(format!(
        "{name}: the change was made against epoch {expected}, the directory's map is at \
         epoch {epoch}: read the map again and make the change against it"
    )))
}

fn move_step(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = MOVE_SIG.args(raw)?;
    let [Value::Int(expected), Value::Bytes(bytes)] = args.as_slice() else {
        return Err(MOVE_SIG.mismatch());
    };
    let fail = |why: String| Abort(format!("{MOVE}: {why}"));
    let next = creek_shard::decode(bytes).map_err(|e| fail(e.to_string()))?;
    let current = held(txn, MOVE)?.ok_or_else(|| fail("the directory holds no map yet".into()))?;
    check_expected(MOVE, *expected, current.epoch)?;
    let e = current.epoch;
    // The one step that can lead from the current map to `next`.
    let step =
        match (&current.moving, &next.moving) {
            (None, Some(m)) => current.begin_move(e, m.clone()),
            (Some(_), None) if next.moved > current.moved => current.switch_move(e),
            (Some(_), None) => current.cancel_move(e),
            (None, None) if current.finishing.is_some() && next.finishing.is_none() => {
                current.finish_move(e)
            }
            _ => match current.shards.keys().find(|s| !next.shards.contains_key(s)) {
                Some(gone) => current.drop_shard(e, *gone),
                None => return Err(fail(
                    "the map takes no step of a move (begin, switch, cancel, finish, drop a shard)"
                        .into(),
                )),
            },
        }
        .map_err(|e| fail(e.to_string()))?;
    if step != next {
        return Err(fail(format!(
            "the map (epoch {}) is not the directory's map (epoch {e}) with one step of a move \
             taken",
            next.epoch
        )));
    }
    txn.put(Bytes::from_static(MAP_KEY), bytes.clone());
    Ok(Value::Int(i64::try_from(next.epoch).unwrap_or(i64::MAX)).encode())
}

/// The abort of `directory.set`, `directory.move` or `mpo.sequence` called
/// in a weak op.
pub(crate) fn level_violation(call: &ProcCall) -> Option<Abort> {
    if call.strong {
        return None;
    }
    match &*call.name {
        SET | MOVE => Some(Abort::new(format!(
            "{} changes the shard map, which is strong state: invoke it at the strong level",
            call.name
        ))),
        SEQUENCE => Some(Abort::new(format!(
            "{SEQUENCE} orders operations across shards: invoke it at the strong level"
        ))),
        _ => None,
    }
}

/// `mpo.sequence`'s MPO id and its shards (2 to `PARTS_MAX`, distinct,
/// ascending).
fn sequence_args(raw: &[u8]) -> Result<((u64, u64), Vec<u32>), String> {
    let usage = || format!("{SEQUENCE} expects (origin: int, seq: int, shards: list of int)");
    let args = decode_args(raw).map_err(|e| format!("{SEQUENCE}: {e}"))?;
    let [Value::Int(origin), Value::Int(seq), Value::List(shards)] = args.as_slice() else {
        return Err(usage());
    };
    let id = (
        u64::try_from(*origin).map_err(|_| usage())?,
        u64::try_from(*seq).map_err(|_| usage())?,
    );
    let shards: Vec<u32> = shards
        .iter()
        .map(|s| s.as_int().and_then(|n| u32::try_from(n).ok()))
        .collect::<Option<_>>()
        .ok_or_else(usage)?;
    if shards.len() < 2 || shards.len() > crate::mpo::PARTS_MAX {
        return Err(format!(
            "{SEQUENCE}: an operation across shards involves 2 to {} shards, not {}",
            crate::mpo::PARTS_MAX,
            shards.len()
        ));
    }
    if shards.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("{SEQUENCE}: shards must be distinct and ascending"));
    }
    Ok((id, shards))
}

fn next_args(raw: &[u8]) -> Result<(u32, u64), String> {
    let usage = || format!("{NEXT} expects (shard: int, index: int)");
    let args = decode_args(raw).map_err(|e| format!("{NEXT}: {e}"))?;
    let [Value::Int(shard), Value::Int(index)] = args.as_slice() else {
        return Err(usage());
    };
    Ok((
        u32::try_from(*shard).map_err(|_| usage())?,
        u64::try_from(*index).map_err(|_| usage())?,
    ))
}

fn key(prefix: &[u8], parts: &[&[u8]]) -> Bytes {
    let mut k = prefix.to_vec();
    for p in parts {
        k.extend_from_slice(p);
    }
    Bytes::from(k)
}

fn int(n: u64) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// A strong call of `mpo.sequence` for MPO `(origin, seq)` involving
/// `shards` (ascending): what an MPO's driver asks the directory.
pub fn sequence_call(origin: u64, seq: u64, shards: &[u32]) -> ProcCall {
    let mut call = ProcCall::new(
        SEQUENCE,
        creek_types::value::encode_args(&[
            int(origin),
            int(seq),
            Value::List(shards.iter().map(|s| Value::Int(i64::from(*s))).collect()),
        ]),
    );
    call.strong = true;
    call
}

/// Where the directory's committed state holds the indices MPO
/// `(origin, seq)` got (`mpo.sequence`'s answer, [`decode_indices`]): a
/// directory replica answers a sequenced MPO from here without an op.
pub fn sequenced_key(origin: u64, seq: u64) -> Bytes {
    key(SEQ_OF, &[&origin.to_be_bytes(), &seq.to_be_bytes()])
}

/// `mpo.sequence`'s answer as `(shard, index)` pairs; `None` if malformed.
pub fn decode_indices(raw: &[u8]) -> Option<Vec<(u32, u64)>> {
    let Ok(Value::List(given)) = Value::decode(raw) else {
        return None;
    };
    given
        .iter()
        .map(|g| match g.as_list()? {
            [Value::Int(s), Value::Int(k)] => {
                Some((u32::try_from(*s).ok()?, u64::try_from(*k).ok()?))
            }
            _ => None,
        })
        .collect()
}

/// `mpo.sequence(origin, seq, shards)` → `[[shard, index], …]`.
fn sequence(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let ((origin, seq), shards) = sequence_args(raw).map_err(Abort)?;
    let of = sequenced_key(origin, seq);
    if let Some(done) = txn.get(&of) {
        return Ok(done); // sequenced before: the same indices
    }
    let record = Value::List(vec![
        int(origin),
        int(seq),
        Value::List(shards.iter().map(|s| Value::Int(i64::from(*s))).collect()),
    ])
    .encode();
    let mut given = Vec::with_capacity(shards.len());
    for shard in shards {
        let last_key = key(SEQ_LAST, &[&shard.to_be_bytes()]);
        let last = txn
            .get(&last_key)
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(0, u64::from_be_bytes);
        let index = last + 1;
        txn.put(last_key, Bytes::copy_from_slice(&index.to_be_bytes()));
        txn.put(
            key(SEQ_AT, &[&shard.to_be_bytes(), &index.to_be_bytes()]),
            record.clone(),
        );
        given.push(Value::List(vec![Value::Int(i64::from(shard)), int(index)]));
    }
    let answer = Value::List(given).encode();
    txn.put(of, answer.clone());
    Ok(answer)
}

/// `mpo.next(shard, index)` → `[origin, seq, shards]`, or nil.
fn next(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (shard, index) = next_args(raw).map_err(Abort)?;
    let at = key(SEQ_AT, &[&shard.to_be_bytes(), &index.to_be_bytes()]);
    Ok(txn.get(&at).unwrap_or_else(|| Value::Nil.encode()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::builtins::testkit::Harness;
    use creek_shard::{Placement, ShardId, ShardMap};
    use creek_types::value::encode_args;

    fn harness() -> Harness {
        let mut h = Harness::new();
        register(&mut h.reg);
        h
    }

    fn set_call(expected: i64, map: &ShardMap, strong: bool) -> ProcCall {
        let mut call = ProcCall::new(
            SET,
            encode_args(&[Value::Int(expected), Value::Bytes(creek_shard::encode(map))]),
        );
        call.strong = strong;
        call
    }

    fn held(h: &mut Harness) -> Option<ShardMap> {
        let ex = h.exec(&ProcCall::new(MAP, encode_args(&[])));
        match Value::decode(&ex.outcome.unwrap()).unwrap() {
            Value::Bytes(b) => Some(creek_shard::decode(&b).unwrap()),
            _ => None,
        }
    }

    #[test]
    fn the_first_map_then_changes_against_the_epoch_read() {
        let mut h = harness();
        assert_eq!(held(&mut h), None);
        let first = ShardMap::hashed(5, &[ShardId(0), ShardId(1)]);
        assert!(h.exec(&set_call(0, &first, true)).outcome.is_ok());
        assert_eq!(held(&mut h), Some(first.clone()));
        // Formed once: a second first map is refused.
        let again = h.exec(&set_call(0, &first, true)).outcome.unwrap_err();
        assert!(again.0.contains("against epoch 0"), "{}", again.0);
        let next = first
            .place(1, Some("config"), Placement::Pinned(ShardId(1)))
            .unwrap();
        // Weak: refused.
        let weak = h.exec(&set_call(1, &next, false)).outcome.unwrap_err();
        assert!(weak.0.contains("strong level"), "{}", weak.0);
        assert!(h.exec(&set_call(1, &next, true)).outcome.is_ok());
        assert_eq!(held(&mut h).unwrap().epoch, 2);
        // A change that moves keys, or of another cluster: refused, the
        // map unchanged.
        let moved = next.place(2, None, Placement::Pinned(ShardId(0))).unwrap();
        let e = h.exec(&set_call(2, &moved, true)).outcome.unwrap_err();
        assert!(e.0.contains("moves keys"), "{}", e.0);
        let mut other = next.clone();
        other.cluster = 6;
        other.epoch = 3;
        let e = h.exec(&set_call(2, &other, true)).outcome.unwrap_err();
        assert!(e.0.contains("cluster"), "{}", e.0);
        let e = h
            .exec(&ProcCall::new(
                SET,
                encode_args(&[Value::Int(2), Value::from("junk")]),
            ))
            .outcome
            .unwrap_err();
        assert!(e.0.contains("shard map"), "{}", e.0);
        // A move's step, even one the map rules allow: refused (moves carry
        // their data).
        let m = creek_shard::Move {
            keyspace: None,
            keys: creek_shard::MoveKeys::Slots { first: 0, end: 8 },
            from: ShardId(0),
            to: ShardId(1),
        };
        let begun = next.begin_move(2, m).unwrap();
        let e = h.exec(&set_call(2, &begun, true)).outcome.unwrap_err();
        assert!(e.0.contains("not set"), "{}", e.0);
        assert_eq!(held(&mut h), Some(next));
    }

    fn sequence(h: &mut Harness, seq: i64, shards: &[i64], strong: bool) -> Result<Value, String> {
        let shards = Value::List(shards.iter().map(|s| Value::Int(*s)).collect());
        let mut call = ProcCall::new(
            SEQUENCE,
            encode_args(&[Value::Int(7), Value::Int(seq), shards]),
        );
        call.strong = strong;
        match h.exec(&call).outcome {
            Ok(b) => Ok(Value::decode(&b).unwrap()),
            Err(e) => Err(e.0),
        }
    }

    fn given(pairs: &[(i64, i64)]) -> Value {
        Value::List(
            pairs
                .iter()
                .map(|(s, i)| Value::List(vec![Value::Int(*s), Value::Int(*i)]))
                .collect(),
        )
    }

    #[test]
    fn the_sequencer_gives_each_shard_its_next_index_once_per_mpo() {
        let mut h = harness();
        assert_eq!(
            sequence(&mut h, 1, &[0, 1], true),
            Ok(given(&[(0, 1), (1, 1)]))
        );
        assert_eq!(
            sequence(&mut h, 2, &[1, 2], true),
            Ok(given(&[(1, 2), (2, 1)]))
        );
        // Asked again (a retry): the same indices, no new ones.
        assert_eq!(
            sequence(&mut h, 1, &[0, 1], true),
            Ok(given(&[(0, 1), (1, 1)]))
        );
        assert_eq!(
            sequence(&mut h, 3, &[0, 2], true),
            Ok(given(&[(0, 2), (2, 2)]))
        );
        let at = |h: &mut Harness, shard: i64, index: i64| {
            let ex = h.exec(&ProcCall::new(
                NEXT,
                encode_args(&[Value::Int(shard), Value::Int(index)]),
            ));
            Value::decode(&ex.outcome.unwrap()).unwrap()
        };
        let mpo2 = Value::List(vec![
            Value::Int(7),
            Value::Int(2),
            Value::List(vec![Value::Int(1), Value::Int(2)]),
        ]);
        assert_eq!(at(&mut h, 1, 2), mpo2);
        assert_eq!(at(&mut h, 1, 3), Value::Nil);
        // Refused: weak, one shard, shards out of order, junk.
        assert!(sequence(&mut h, 4, &[0, 1], false)
            .unwrap_err()
            .contains("strong level"));
        assert!(sequence(&mut h, 4, &[0], true)
            .unwrap_err()
            .contains("2 to"));
        assert!(sequence(&mut h, 4, &[1, 0], true)
            .unwrap_err()
            .contains("ascending"));
        assert!(h
            .reg
            .check(
                &ProcCall::new(SEQUENCE, encode_args(&[])),
                &Default::default()
            )
            .is_err());
        assert_eq!(
            at(&mut h, 0, 3),
            Value::Nil,
            "nothing refused took an index"
        );
    }
}
