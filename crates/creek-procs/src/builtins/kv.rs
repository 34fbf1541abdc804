//! `kv.*`: plain key-value procedures over user keys.
//!
//! `kv.incr` keeps its counter as the decimal ASCII text of an `i64`, so
//! `kv.get` shows it readably.

use bytes::Bytes;

use super::{describe_all, lease, Sig, Subject, Ty};
use crate::registry::{Registry, Route, INTERNAL_KEY_PREFIX};
use crate::versions;
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::Value;

const GET: Sig = Sig {
    name: "kv.get",
    params: &[("key", Ty::Bytes)],
    subject: Subject::Key,
};
const GET_META: Sig = Sig {
    name: "kv.get_meta",
    params: &[("key", Ty::Bytes)],
    subject: Subject::Key,
};
const PUT: Sig = Sig {
    name: "kv.put",
    params: &[("key", Ty::Bytes), ("value", Ty::Bytes)],
    subject: Subject::Key,
};
const DELETE: Sig = Sig {
    name: "kv.delete",
    params: &[("key", Ty::Bytes)],
    subject: Subject::Key,
};
const CAS: Sig = Sig {
    name: "kv.cas",
    params: &[
        ("key", Ty::Bytes),
        ("expected", Ty::BytesOrNil),
        ("new", Ty::BytesOrNil),
    ],
    subject: Subject::Key,
};
const INCR: Sig = Sig {
    name: "kv.incr",
    params: &[("key", Ty::Bytes), ("delta", Ty::Int)],
    subject: Subject::Key,
};

const MGET: Sig = Sig {
    name: "kv.mget",
    params: &[("keys", Ty::BytesList)],
    subject: Subject::None,
};
const MPUT: Sig = Sig {
    name: "kv.mput",
    params: &[("keys", Ty::BytesList), ("values", Ty::BytesList)],
    subject: Subject::None,
};
const TRANSFER: Sig = Sig {
    name: "kv.transfer",
    params: &[("from", Ty::Bytes), ("to", Ty::Bytes), ("amount", Ty::Int)],
    // Both keys are checked by `transfer_args` (and their size by the
    // route's keys, `Registry::check`).
    subject: Subject::None,
};

/// Most keys one `kv.mget` or `kv.mput` names.
pub const MULTI_KEYS_MAX: usize = 1024;

/// Register the `kv.*` procedures.
pub(super) fn register(r: &mut Registry) {
    r.register_fn(GET.name, true, |a| GET.check(a), get);
    r.register_fn(GET_META.name, true, |a| GET_META.check(a), get_meta);
    r.register_fn(PUT.name, false, check_put, put);
    r.register_fn(DELETE.name, false, |a| DELETE.check(a), delete);
    r.register_fn(CAS.name, false, |a| CAS.check(a), cas);
    r.register_fn(INCR.name, false, |a| INCR.check(a), incr);
    r.register_fn(MGET.name, true, check_mget, mget);
    r.register_fn(MPUT.name, false, check_mput, mput);
    r.register_fn(TRANSFER.name, false, check_transfer, transfer);
    describe_all(
        r,
        &[
            (&GET, "bytes, or nil if absent", "Read a key."),
            (
                &GET_META,
                "list: [value, version, create_revision, mod_revision, lease], or nil if absent",
                "Read a key with its version (writes since its creation), the revisions of its \
                 creation and last write (0: written before any was kept), and its lease (0: none). \
                 Revisions are those of committed writes.",
            ),
            (
                &PUT,
                "nil",
                "Write a key (a third argument, a lease id, attaches it to that lease).",
            ),
            (&DELETE, "bool: existed", "Delete a key."),
            (
                &CAS,
                "bool: swapped",
                "Set key to new if it holds expected (nil: absent; a nil new deletes).",
            ),
            (
                &INCR,
                "int: new value",
                "Add delta to the counter at key (absent counts as 0; kept as decimal text).",
            ),
            (
                &MGET,
                "list: each key's value, or nil if absent",
                "Read several keys at once.",
            ),
            (
                &MPUT,
                "nil",
                "Write several keys at once (keys[i] gets values[i]).",
            ),
            (
                &TRANSFER,
                "list: the two counters' new values",
                "Move amount from the counter at from to the one at to (absent counts as 0); aborts if from holds less.",
            ),
        ],
    );
    // Their keys are all their arguments name: they run on the shard
    // owning every one (docs/shards.md).
    r.route(MGET.name, Route::List(0));
    r.route(MPUT.name, Route::List(0));
    r.route(TRANSFER.name, Route::Args(0, 1));
}

/// The keys in list argument 0 of a multi-key call: at most
/// [`MULTI_KEYS_MAX`], none reserved (what its check and its body both
/// take them through).
fn keys_of<'a>(sig: &Sig, args: &'a [Value]) -> Result<Vec<&'a Bytes>, String> {
    let Some(Value::List(keys)) = args.first() else {
        return Err(format!("{} expects {}", sig.name, sig.signature()));
    };
    if keys.len() > MULTI_KEYS_MAX {
        return Err(format!(
            "{}: {} keys exceed the limit of {MULTI_KEYS_MAX} per call",
            sig.name,
            keys.len()
        ));
    }
    keys.iter()
        .map(|k| match k {
            Value::Bytes(b) if b.first() == Some(&INTERNAL_KEY_PREFIX) => Err(format!(
                "{}: keys starting with 0x00 are reserved",
                sig.name
            )),
            Value::Bytes(b) => Ok(b),
            _ => Err(format!("{} expects {}", sig.name, sig.signature())),
        })
        .collect()
}

/// `kv.mput`'s keys and values, one value per key.
fn mput_items(args: &[Value]) -> Result<(Vec<&Bytes>, Vec<&Bytes>), String> {
    let keys = keys_of(&MPUT, args)?;
    let values: Vec<&Bytes> = match args.get(1) {
        Some(Value::List(values)) => values.iter().filter_map(Value::as_bytes).collect(),
        _ => Vec::new(),
    };
    if keys.len() != values.len() {
        return Err(format!(
            "kv.mput: {} keys but {} values: give one value per key",
            keys.len(),
            values.len()
        ));
    }
    Ok((keys, values))
}

/// `kv.transfer`'s two distinct, unreserved keys and its amount (not
/// negative).
fn transfer_args(args: &[Value]) -> Result<(&Bytes, &Bytes, i64), String> {
    let [Value::Bytes(from), Value::Bytes(to), Value::Int(amount)] = args else {
        return Err(format!("kv.transfer expects {}", TRANSFER.signature()));
    };
    if [from, to]
        .iter()
        .any(|k| k.first() == Some(&INTERNAL_KEY_PREFIX))
    {
        return Err("kv.transfer: keys starting with 0x00 are reserved".into());
    }
    if from == to {
        return Err("kv.transfer: from and to are the same key".into());
    }
    if *amount < 0 {
        return Err(format!(
            "kv.transfer: amount must not be negative, got {amount} (swap from and to instead)"
        ));
    }
    Ok((from, to, *amount))
}

fn check_mget(raw: &[u8]) -> Result<(), String> {
    keys_of(&MGET, &MGET.parse(raw)?).map(drop)
}

fn check_mput(raw: &[u8]) -> Result<(), String> {
    mput_items(&MPUT.parse(raw)?).map(drop)
}

fn check_transfer(raw: &[u8]) -> Result<(), String> {
    transfer_args(&TRANSFER.parse(raw)?).map(drop)
}

/// `kv.mget(keys)` → a list with each key's value, or nil if absent.
fn mget(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = MGET.args(raw)?;
    let values = keys_of(&MGET, &args)
        .map_err(Abort)?
        .into_iter()
        .map(|k| txn.get(k).map_or(Value::Nil, Value::Bytes))
        .collect();
    Ok(Value::List(values).encode())
}

/// `kv.mput(keys, values)` → nil; `keys[i]` gets `values[i]` (a key
/// given twice keeps its last value).
fn mput(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = MPUT.args(raw)?;
    let (keys, values) = mput_items(&args).map_err(Abort)?;
    for (k, v) in keys.into_iter().zip(values) {
        lease::put_plain(txn, k, v);
    }
    Ok(Value::Nil.encode())
}

/// The counter at `key`: absent counts as 0; kept as decimal text.
fn counter(txn: &mut Txn<'_>, key: &Bytes) -> Result<i64, Abort> {
    match txn.get(key) {
        None => Ok(0),
        Some(stored) => std::str::from_utf8(&stored)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| Abort::new("value of key is not an integer")),
    }
}

/// `kv.transfer(from, to, amount)` → `[from's new value, to's new value]`;
/// aborts, changing nothing, if `from` holds less than `amount`.
fn transfer(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = TRANSFER.args(raw)?;
    let (from, to, amount) = transfer_args(&args).map_err(Abort)?;
    let have = counter(txn, from)?;
    if have < amount {
        return Err(Abort::new(format!(
            "kv.transfer: key {} holds {have}, less than {amount}",
            Value::Bytes(from.clone())
        )));
    }
    let dest = counter(txn, to)?;
    let new_to = dest
        .checked_add(amount)
        .ok_or_else(|| Abort::new(format!("kv.transfer overflows: {dest} + {amount}")))?;
    let new_from = have - amount;
    txn.put(from.clone(), Bytes::from(new_from.to_string()));
    txn.put(to.clone(), Bytes::from(new_to.to_string()));
    Ok(Value::List(vec![Value::Int(new_from), Value::Int(new_to)]).encode())
}

/// `kv.get(key)` → the value, or nil if absent.
fn get(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = GET.args(raw)?;
    let [Value::Bytes(key)] = args.as_slice() else {
        return Err(GET.mismatch());
    };
    Ok(txn.get(key).map_or(Value::Nil, Value::Bytes).encode())
}

/// `kv.get_meta(key)` → nil if absent, else `[value, version,
/// create_revision, mod_revision, lease]` (docs/api.md, "Versions and
/// revisions").
fn get_meta(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = GET_META.args(raw)?;
    let [Value::Bytes(key)] = args.as_slice() else {
        return Err(GET_META.mismatch());
    };
    let Some(value) = txn.get(key) else {
        return Ok(Value::Nil.encode());
    };
    let meta = versions::read(txn, key);
    let int = |n: u64| Value::Int(i64::try_from(n).unwrap_or(i64::MAX));
    Ok(Value::List(vec![
        Value::Bytes(value),
        int(meta.version),
        int(meta.create),
        int(meta.modified),
        Value::Int(lease::lease_of(txn, key)),
    ])
    .encode())
}

/// `kv.put`'s arguments: `(key, value)`, or `(key, value, lease)`.
fn check_put(raw: &[u8]) -> Result<(), String> {
    match creek_types::value::decode_args(raw) {
        Ok(args) if args.len() == 3 => lease::check_put_lease(raw),
        _ => PUT.check(raw),
    }
}

/// `kv.put(key, value)` → nil; `kv.put(key, value, lease)` attaches the key
/// to the lease, and a put without one detaches it from any.
fn put(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = creek_types::value::decode_args_shared(raw)
        .map_err(|e| Abort(format!("kv.put: malformed arguments: {e}")))?;
    let sig = if args.len() == 3 {
        &lease::PUT_LEASE
    } else {
        &PUT
    };
    sig.check_values(&args).map_err(Abort)?;
    match args.as_slice() {
        [Value::Bytes(key), Value::Bytes(value)] => {
            lease::put_plain(txn, key, value);
            Ok(Value::Nil.encode())
        }
        [Value::Bytes(key), Value::Bytes(value), Value::Int(id)] => {
            lease::put_with_lease(txn, key, value, *id)
        }
        _ => Err(sig.mismatch()),
    }
}

/// `kv.delete(key)` → whether the key existed.
fn delete(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = DELETE.args(raw)?;
    let [Value::Bytes(key)] = args.as_slice() else {
        return Err(DELETE.mismatch());
    };
    Ok(Value::Bool(delete_key(txn, key)).encode())
}

/// Delete `key`; whether it existed (`kv.delete`, and `kv.txn`'s delete).
pub(super) fn delete_key(txn: &mut Txn<'_>, key: &Bytes) -> bool {
    let existed = txn.get(key).is_some();
    if existed {
        lease::detach(txn, key);
        txn.delete(key.clone());
    }
    existed
}

/// `kv.cas(key, expected, new)` → whether the swap happened. A nil
/// `expected` means "absent"; a nil `new` deletes.
fn cas(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = CAS.args(raw)?;
    let [Value::Bytes(key), expected, new] = args.as_slice() else {
        return Err(CAS.mismatch());
    };
    let (Some(expected), Some(new)) = (bytes_or_nil(expected), bytes_or_nil(new)) else {
        return Err(CAS.mismatch());
    };
    let current = txn.get(key);
    if current != expected {
        return Ok(Value::Bool(false).encode());
    }
    match new {
        Some(v) => lease::put_plain(txn, key, &v),
        None if current.is_some() => {
            lease::detach(txn, key);
            txn.delete(key.clone());
        }
        None => {}
    }
    Ok(Value::Bool(true).encode())
}

/// `Some(Some(b))` for bytes, `Some(None)` for nil, `None` otherwise.
fn bytes_or_nil(v: &Value) -> Option<Option<Bytes>> {
    match v {
        Value::Bytes(b) => Some(Some(b.clone())),
        Value::Nil => Some(None),
        _ => None,
    }
}

/// `kv.incr(key, delta)` → the new value; absent counts as 0.
fn incr(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = INCR.args(raw)?;
    let [Value::Bytes(key), Value::Int(delta)] = args.as_slice() else {
        return Err(INCR.mismatch());
    };
    let current = counter(txn, key)?;
    let new = current
        .checked_add(*delta)
        .ok_or_else(|| Abort::new(format!("kv.incr overflows: {current} + {delta}")))?;
    txn.put(key.clone(), Bytes::from(new.to_string()));
    Ok(Value::Int(new).encode())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::builtins::testkit::Harness;
    use creek_exec::txn::Abort;
    use creek_types::value::{encode_args, Value};
    use creek_types::{ClientRequestId, ProcCall};

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    /// `[value, version, create, mod, lease]`, as `kv.get_meta` answers.
    fn meta(value: &str, version: i64, create: i64, modified: i64, lease: i64) -> Value {
        Value::List(vec![
            b(value),
            Value::Int(version),
            Value::Int(create),
            Value::Int(modified),
            Value::Int(lease),
        ])
    }

    #[test]
    fn a_key_carries_its_version_and_revisions_until_deleted() {
        let mut h = Harness::new();
        // Every call is final at the next revision, reads included.
        assert_eq!(h.ok("kv.get_meta", &[b("k")]), Value::Nil); // revision 1
        h.ok("kv.put", &[b("k"), b("a")]); // 2
        h.ok("kv.put", &[b("other"), b("x")]); // 3
        h.ok("kv.incr", &[b("n"), Value::Int(1)]); // 4
        h.ok("kv.put", &[b("k"), b("b")]); // 5
        assert_eq!(h.ok("kv.get_meta", &[b("k")]), meta("b", 2, 2, 5, 0));
        assert_eq!(h.ok("kv.get_meta", &[b("n")]), meta("1", 1, 4, 4, 0));
        // A read, a refused write and an abort leave the record alone.
        h.ok("kv.cas", &[b("k"), b("zzz"), b("c")]);
        assert!(h.call("kv.incr", &[b("k"), Value::Int(1)]).is_err());
        assert_eq!(h.ok("kv.get_meta", &[b("k")]), meta("b", 2, 2, 5, 0));
        h.ok("kv.delete", &[b("k")]); // 11
        assert_eq!(h.ok("kv.get_meta", &[b("k")]), Value::Nil);
        h.ok("kv.put", &[b("k"), b("c")]); // 13: created again
        assert_eq!(h.ok("kv.get_meta", &[b("k")]), meta("c", 1, 13, 13, 0));
        let e = h.call("kv.get_meta", &[b("\0tv/k")]).expect_err("reserved");
        assert!(e.0.contains("reserved"), "{e}");
        assert!(h.check("kv.get_meta", &[b("k"), b("x")]).is_err());
    }

    #[test]
    fn transactions_compare_versions_revisions_and_leases() {
        let mut h = Harness::new();
        h.ok("kv.put", &[b("k"), b("a")]); // revision 1
        h.ok("kv.put", &[b("k"), b("b")]); // 2
                                           // Each compare below runs at a later revision and writes nothing.
        let cmp = |target: &str, op: &str, n: i64| {
            Value::List(vec![b("k"), b(target), b(op), Value::Int(n)])
        };
        let absent = |target: &str| Value::List(vec![b("gone"), b(target), b("="), Value::Int(0)]);
        let holds = |h: &mut Harness, c: Value| {
            let got = h.ok(
                "kv.txn",
                &[
                    Value::List(vec![c]),
                    Value::List(vec![]),
                    Value::List(vec![]),
                ],
            );
            got == Value::List(vec![Value::Bool(true), Value::List(vec![])])
        };
        for (c, want) in [
            (cmp("version", "=", 2), true),
            (cmp("version", ">", 2), false),
            (cmp("create", "=", 1), true),
            (cmp("mod", "=", 2), true),
            (cmp("mod", "<", 2), false),
            (cmp("mod", "!=", 1), true),
            (cmp("lease", "=", 0), true),
            (absent("version"), true),
            (absent("create"), true),
            (absent("mod"), true),
            (absent("lease"), true),
        ] {
            assert_eq!(holds(&mut h, c.clone()), want, "{c}");
        }
    }

    #[test]
    fn put_get_delete() {
        let mut h = Harness::new();
        assert_eq!(h.ok("kv.get", &[b("k")]), Value::Nil);
        assert_eq!(h.ok("kv.put", &[b("k"), b("v")]), Value::Nil);
        assert_eq!(h.ok("kv.get", &[b("k")]), b("v"));
        assert_eq!(h.ok("kv.put", &[b("k"), b("")]), Value::Nil);
        assert_eq!(h.ok("kv.get", &[b("k")]), b(""));
        assert_eq!(h.ok("kv.delete", &[b("k")]), Value::Bool(true));
        assert_eq!(h.ok("kv.delete", &[b("k")]), Value::Bool(false));
        assert_eq!(h.ok("kv.get", &[b("k")]), Value::Nil);
        assert!(h.keys().is_empty());
    }

    #[test]
    fn get_is_read_only_and_records_its_read() {
        let mut h = Harness::new();
        let ex = h.exec(&ProcCall::new("kv.get", encode_args(&[b("k")])));
        assert!(ex.writes.is_empty());
        // The key, and the map its shard executes under.
        let read: Vec<&[u8]> = ex.reads.iter().map(|(k, _)| &k[..]).collect();
        assert_eq!(read, [crate::ownership::MAP_KEY, b"k"]);
        assert!(h.reg.get("kv.get").is_some_and(|p| p.read_only));
    }

    #[test]
    fn cas() {
        let mut h = Harness::new();
        // Absent: only a nil expectation matches.
        assert_eq!(
            h.ok("kv.cas", &[b("k"), b("x"), b("1")]),
            Value::Bool(false)
        );
        assert_eq!(h.ok("kv.get", &[b("k")]), Value::Nil);
        assert_eq!(
            h.ok("kv.cas", &[b("k"), Value::Nil, b("1")]),
            Value::Bool(true)
        );
        assert_eq!(h.ok("kv.get", &[b("k")]), b("1"));
        // Present: nil expectation fails, the right value swaps.
        assert_eq!(
            h.ok("kv.cas", &[b("k"), Value::Nil, b("2")]),
            Value::Bool(false)
        );
        assert_eq!(
            h.ok("kv.cas", &[b("k"), b("0"), b("2")]),
            Value::Bool(false)
        );
        assert_eq!(h.ok("kv.cas", &[b("k"), b("1"), b("2")]), Value::Bool(true));
        assert_eq!(h.ok("kv.get", &[b("k")]), b("2"));
        // Nil new deletes.
        assert_eq!(
            h.ok("kv.cas", &[b("k"), b("2"), Value::Nil]),
            Value::Bool(true)
        );
        assert_eq!(h.ok("kv.get", &[b("k")]), Value::Nil);
        assert_eq!(
            h.ok("kv.cas", &[b("k"), Value::Nil, Value::Nil]),
            Value::Bool(true)
        );
        assert!(h.keys().is_empty());
        assert!(h
            .check("kv.cas", &[b("k"), Value::Int(1), Value::Nil])
            .is_err());
    }

    #[test]
    fn incr() {
        let mut h = Harness::new();
        assert_eq!(h.ok("kv.incr", &[b("c"), Value::Int(5)]), Value::Int(5));
        assert_eq!(h.ok("kv.incr", &[b("c"), Value::Int(-7)]), Value::Int(-2));
        assert_eq!(h.ok("kv.get", &[b("c")]), b("-2"));
        h.ok("kv.put", &[b("c"), b("41")]);
        assert_eq!(h.ok("kv.incr", &[b("c"), Value::Int(1)]), Value::Int(42));
    }

    #[test]
    fn incr_on_non_integer_aborts_and_writes_nothing() {
        let mut h = Harness::new();
        for bad in [
            &b"abc"[..],
            b"",
            b"1.5",
            b" 1",
            b"\xff",
            b"99999999999999999999",
        ] {
            h.ok("kv.put", &[b("c"), Value::from(bad)]);
            let ex = h.exec(&ProcCall::new(
                "kv.incr",
                encode_args(&[b("c"), Value::Int(1)]),
            ));
            assert_eq!(
                ex.outcome,
                Err(Abort::new("value of key is not an integer"))
            );
            assert!(ex.writes.is_empty());
            assert_eq!(h.ok("kv.get", &[b("c")]), Value::from(bad));
        }
    }

    #[test]
    fn incr_overflow_aborts() {
        let mut h = Harness::new();
        h.ok("kv.incr", &[b("c"), Value::Int(i64::MAX)]);
        let ex = h.exec(&ProcCall::new(
            "kv.incr",
            encode_args(&[b("c"), Value::Int(1)]),
        ));
        assert!(ex.outcome.is_err_and(|a| a.0.contains("overflow")));
        assert!(ex.writes.is_empty());
        assert_eq!(
            h.ok("kv.incr", &[b("c"), Value::Int(i64::MIN)]),
            Value::Int(-1)
        );
    }

    #[test]
    fn deduplicated_incr_takes_effect_once() {
        let mut h = Harness::new();
        let mut call = ProcCall::new("kv.incr", encode_args(&[b("c"), Value::Int(3)]));
        call.request_id = Some(ClientRequestId { client: 1, seq: 1 });
        let first = h.exec(&call);
        assert_eq!(first.outcome, Ok(Value::Int(3).encode()));
        let second = h.exec(&call);
        assert_eq!(second.outcome, first.outcome);
        assert!(second.writes.is_empty());
        assert_eq!(h.ok("kv.get", &[b("c")]), b("3"));
        call.request_id = Some(ClientRequestId { client: 1, seq: 2 });
        assert_eq!(h.exec(&call).outcome, Ok(Value::Int(6).encode()));
    }

    #[test]
    fn reserved_keys_are_rejected() {
        let mut h = Harness::new();
        let key = Value::from(&b"\x00dedup/x"[..]);
        let calls: [(&str, Vec<Value>); 5] = [
            ("kv.get", vec![key.clone()]),
            ("kv.put", vec![key.clone(), b("v")]),
            ("kv.delete", vec![key.clone()]),
            ("kv.cas", vec![key.clone(), Value::Nil, b("v")]),
            ("kv.incr", vec![key.clone(), Value::Int(1)]),
        ];
        for (name, args) in calls {
            let err = h.check(name, &args);
            assert_eq!(
                err,
                Err(format!("{name}: keys starting with 0x00 are reserved"))
            );
            let ex = h.exec(&ProcCall::new(name, encode_args(&args)));
            assert!(
                ex.outcome.is_err_and(|a| a.0.contains("reserved")),
                "{name}"
            );
            assert!(ex.writes.is_empty());
        }
        assert!(h.keys().is_empty());
        // A 0x00 later in the key is fine.
        assert!(h
            .check("kv.put", &[Value::from(&b"a\x00"[..]), b("v")])
            .is_ok());
    }

    #[test]
    fn wrong_arity_and_types_are_rejected() {
        let mut h = Harness::new();
        assert_eq!(
            h.check("kv.put", &[b("k")]),
            Err("kv.put expects (key: bytes, value: bytes), got 1 argument".into())
        );
        assert_eq!(
            h.check("kv.get", &[]),
            Err("kv.get expects (key: bytes), got 0 arguments".into())
        );
        assert_eq!(
            h.check("kv.incr", &[b("k"), b("1")]),
            Err(
                "kv.incr expects (key: bytes, delta: int): argument 2 (delta) must be int, got bytes"
                    .into()
            )
        );
        assert!(h
            .check("kv.cas", &[b("k"), Value::Nil])
            .is_err_and(|e| e.contains("(key: bytes, expected: bytes or nil, new: bytes or nil)")));
        assert!(h
            .check_raw("kv.get", Bytes::from_static(b"\x04\x01k"))
            .is_err());
        assert!(h.call("kv.put", &[b("k")]).is_err());
        assert!(h.call("kv.put", &[Value::Int(1), b("v")]).is_err());
        assert!(h.keys().is_empty());
    }

    fn list(items: &[&str]) -> Value {
        Value::List(items.iter().map(|s| b(s)).collect())
    }

    #[test]
    fn mget_and_mput_read_and_write_several_keys() {
        let mut h = Harness::new();
        assert_eq!(
            h.ok("kv.mput", &[list(&["a", "b", "a"]), list(&["1", "2", "3"])]),
            Value::Nil
        );
        assert_eq!(
            h.ok("kv.mget", &[list(&["a", "b", "c"])]),
            Value::List(vec![b("3"), b("2"), Value::Nil])
        );
        assert_eq!(h.ok("kv.mget", &[list(&[])]), Value::List(vec![]));
        assert!(h.reg.get("kv.mget").is_some_and(|p| p.read_only));
        // Both name their keys in list argument 0.
        for name in ["kv.mget", "kv.mput"] {
            assert_eq!(h.reg.route_of(name), crate::Route::List(0));
        }
    }

    #[test]
    fn multi_key_calls_check_every_key() {
        let h = Harness::new();
        assert_eq!(
            h.check("kv.mput", &[list(&["a", "b"]), list(&["1"])]),
            Err("kv.mput: 2 keys but 1 values: give one value per key".into())
        );
        assert!(h
            .check("kv.mget", &[Value::List(vec![b("a"), Value::Int(1)])])
            .is_err_and(|e| e.contains("must be a list of bytes")));
        assert_eq!(
            h.check(
                "kv.mget",
                &[Value::List(vec![
                    b("a"),
                    Value::Bytes(Bytes::from_static(&[0, b'k']))
                ])]
            ),
            Err("kv.mget: keys starting with 0x00 are reserved".into())
        );
        let many = Value::List(
            (0..=super::MULTI_KEYS_MAX)
                .map(|i| b(&i.to_string()))
                .collect(),
        );
        assert!(h
            .check("kv.mget", &[many])
            .is_err_and(|e| e.contains("exceed the limit of 1024")));
        let big = Value::Bytes(Bytes::from(vec![b'k'; 5000]));
        assert!(
            h.check("kv.mget", &[Value::List(vec![b("a"), big])])
                .is_err_and(|e| e.contains("5000")),
            "an oversized key among several is refused"
        );
    }

    #[test]
    fn transfer_moves_between_counters_or_changes_nothing() {
        let mut h = Harness::new();
        h.ok("kv.incr", &[b("a"), Value::Int(10)]);
        assert_eq!(
            h.ok("kv.transfer", &[b("a"), b("b"), Value::Int(4)]),
            Value::List(vec![Value::Int(6), Value::Int(4)])
        );
        assert_eq!(h.ok("kv.get", &[b("b")]), b("4"));
        assert_eq!(
            h.call("kv.transfer", &[b("a"), b("b"), Value::Int(7)]),
            Err(Abort::new("kv.transfer: key \"a\" holds 6, less than 7"))
        );
        assert_eq!(h.ok("kv.get", &[b("a")]), b("6"));
        h.ok("kv.put", &[b("s"), b("x")]);
        assert!(h
            .call("kv.transfer", &[b("s"), b("b"), Value::Int(0)])
            .is_err_and(|e| e.0.contains("is not an integer")));
        assert_eq!(
            h.check("kv.transfer", &[b("a"), b("a"), Value::Int(1)]),
            Err("kv.transfer: from and to are the same key".into())
        );
        assert!(h
            .check("kv.transfer", &[b("a"), b("b"), Value::Int(-1)])
            .is_err_and(|e| e.contains("must not be negative")));
        assert_eq!(h.reg.route_of("kv.transfer"), crate::Route::Args(0, 1));
    }
}
