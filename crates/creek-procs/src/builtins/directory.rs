//! `directory.*`: the shard map as the directory group's state
//! (docs/shards.md, "The directory"). Registered only by the replicas of
//! a directory group ([`register`]); a shard's replicas do not know them.
//!
//! | procedure        | arguments                    | result                      | read-only |
//! |------------------|------------------------------|-----------------------------|-----------|
//! | `directory.map`  | none                         | the map's bytes, or nil     | yes       |
//! | `directory.set`  | `expected: int, map: bytes`  | int: the new map's epoch    |           |
//!
//! `directory.set` is a strong op only. It installs `map` (the bytes of
//! `creek_shard::encode`) if the directory's map is at epoch `expected`
//! (0: the directory holds no map yet, and `map` must be at epoch 1) and
//! `map` may follow it (`creek_shard::ShardMap::check_next`: the same
//! cluster, the next epoch, no key given another owner); otherwise it
//! aborts with the reason and changes nothing.

use bytes::Bytes;

use super::{describe_all, Sig, Subject, Ty};
use crate::registry::Registry;
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::Value;
use creek_types::ProcCall;

/// Where the directory keeps the encoded map.
pub const MAP_KEY: &[u8] = b"\0dir/shard-map";

/// Name of the procedure reading the map.
pub const MAP: &str = "directory.map";
/// Name of the procedure changing it.
pub const SET: &str = "directory.set";

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

/// Register the `directory.*` procedures (a directory group's replicas
/// only; every replica of the group must).
pub fn register(r: &mut Registry) {
    r.register_fn(MAP, true, |a| MAP_SIG.check(a), map);
    r.register_fn(SET, false, |a| SET_SIG.check(a), set);
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
    let current = match txn.get(MAP_KEY) {
        None => None,
        Some(b) => Some(creek_shard::decode(&b).map_err(|e| {
            Abort(format!(
                "{SET}: the directory's own map does not decode: {e}"
            ))
        })?),
    };
    let epoch = current.as_ref().map_or(0, |m| m.epoch);
    if u64::try_from(*expected).ok() != Some(epoch) {
        return Err(Abort(format!(
            "{SET}: the change was made against epoch {expected}, the directory's map is at \
             epoch {epoch}: read the map again and make the change against it"
        )));
    }
    match &current {
        None if next.epoch != 1 => {
            return Err(Abort(format!(
                "{SET}: the first map of a directory has epoch 1; this one has epoch {}",
                next.epoch
            )))
        }
        None => {}
        Some(current) => current
            .check_next(&next)
            .map_err(|e| Abort(format!("{SET}: {e}")))?,
    }
    txn.put(Bytes::from_static(MAP_KEY), bytes.clone());
    Ok(Value::Int(i64::try_from(next.epoch).unwrap_or(i64::MAX)).encode())
}

/// The abort of `directory.set` called in a weak op.
pub(crate) fn level_violation(call: &ProcCall) -> Option<Abort> {
    (!call.strong && &*call.name == SET).then(|| {
        Abort::new(format!(
            "{SET} changes the shard map, which is strong state: invoke it at the strong level"
        ))
    })
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
        assert_eq!(held(&mut h), Some(next));
    }
}
