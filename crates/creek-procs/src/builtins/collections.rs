//! `list.*` and `set.*`: small collections stored whole under one key.
//!
//! A list `name` lives under `[0x00, b'l'] ++ name` as an encoded `List` of
//! `Bytes`; a set under `[0x00, b's'] ++ name` as an encoded `List` of
//! `Bytes`, sorted and without duplicates (an empty set has no key). Their
//! size is bounded by the transaction's value limit.

use bytes::{BufMut, Bytes, BytesMut};

use super::{describe_all, Sig, Subject, Ty};
use crate::registry::{Registry, INTERNAL_KEY_PREFIX};
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::Value;

const LIST_APPEND: Sig = Sig {
    name: "list.append",
    params: &[("list", Ty::Bytes), ("item", Ty::Bytes)],
    subject: Subject::Name(None),
};
const LIST_READ: Sig = Sig {
    name: "list.read",
    params: &[("list", Ty::Bytes)],
    subject: Subject::Name(None),
};
const LIST_LEN: Sig = Sig {
    name: "list.len",
    params: &[("list", Ty::Bytes)],
    subject: Subject::Name(None),
};
const SET_ADD: Sig = Sig {
    name: "set.add",
    params: &[("set", Ty::Bytes), ("item", Ty::Bytes)],
    subject: Subject::Name(None),
};
const SET_REMOVE: Sig = Sig {
    name: "set.remove",
    params: &[("set", Ty::Bytes), ("item", Ty::Bytes)],
    subject: Subject::Name(None),
};
const SET_CONTAINS: Sig = Sig {
    name: "set.contains",
    params: &[("set", Ty::Bytes), ("item", Ty::Bytes)],
    subject: Subject::Name(None),
};
const SET_READ: Sig = Sig {
    name: "set.read",
    params: &[("set", Ty::Bytes)],
    subject: Subject::Name(None),
};

/// Register the `list.*` and `set.*` procedures.
pub(super) fn register(r: &mut Registry) {
    r.register_fn(
        LIST_APPEND.name,
        false,
        |a| LIST_APPEND.check(a),
        list_append,
    );
    r.register_fn(LIST_READ.name, true, |a| LIST_READ.check(a), list_read);
    r.register_fn(LIST_LEN.name, true, |a| LIST_LEN.check(a), list_len);
    r.register_fn(SET_ADD.name, false, |a| SET_ADD.check(a), set_add);
    r.register_fn(SET_REMOVE.name, false, |a| SET_REMOVE.check(a), set_remove);
    r.register_fn(
        SET_CONTAINS.name,
        true,
        |a| SET_CONTAINS.check(a),
        set_contains,
    );
    r.register_fn(SET_READ.name, true, |a| SET_READ.check(a), set_read);
    describe_all(
        r,
        &[
            (&LIST_APPEND, "int: new length", "Append item to the list."),
            (&LIST_READ, "list of bytes", "The whole list."),
            (&LIST_LEN, "int", "The list's length."),
            (&SET_ADD, "bool: added", "Add item to the set."),
            (&SET_REMOVE, "bool: removed", "Remove item from the set."),
            (&SET_CONTAINS, "bool", "Whether the set holds item."),
            (&SET_READ, "sorted list of bytes", "The whole set."),
        ],
    );
}

/// Where set `name` is stored. A name starting with `essions/` is
/// refused: `\0s` and it would be one of the session table's keys
/// (`\0sessions/…`), which a set must never overwrite.
fn set_key(name: &[u8]) -> Result<Bytes, Abort> {
    if name.starts_with(b"essions/") {
        return Err(Abort::new(format!(
            "set name {:?} is reserved: set names may not start with \"essions/\"",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(key(b's', name))
}

fn key(kind: u8, name: &[u8]) -> Bytes {
    let mut k = BytesMut::with_capacity(2 + name.len());
    k.put_slice(&[INTERNAL_KEY_PREFIX, kind]);
    k.put_slice(name);
    k.freeze()
}

/// The items stored under `key` (none if absent). With `sorted`, they must
/// also be strictly increasing.
fn load(txn: &mut Txn<'_>, key: &[u8], sorted: bool) -> Result<Vec<Bytes>, Abort> {
    let Some(raw) = txn.get(key) else {
        return Ok(Vec::new());
    };
    let what = if sorted { "set" } else { "list" };
    let corrupt = || Abort::new(format!("corrupt stored {what}"));
    let Ok(Value::List(values)) = Value::decode(&raw) else {
        return Err(corrupt());
    };
    let items = values
        .into_iter()
        .map(|v| match v {
            Value::Bytes(b) => Ok(b),
            _ => Err(corrupt()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if sorted && items.windows(2).any(|w| w[0] >= w[1]) {
        return Err(corrupt());
    }
    Ok(items)
}

fn items_value(items: Vec<Bytes>) -> Value {
    Value::List(items.into_iter().map(Value::Bytes).collect())
}

fn len_value(items: &[Bytes]) -> Result<Value, Abort> {
    let n = i64::try_from(items.len()).map_err(|_| Abort::new("collection too large"))?;
    Ok(Value::Int(n))
}

/// The name argument of `sig`.
fn name_arg(sig: &Sig, raw: &Bytes) -> Result<Bytes, Abort> {
    match sig.args(raw)?.as_slice() {
        [Value::Bytes(name)] => Ok(name.clone()),
        _ => Err(sig.mismatch()),
    }
}

/// The name and item arguments of `sig`.
fn name_item_args(sig: &Sig, raw: &Bytes) -> Result<(Bytes, Bytes), Abort> {
    match sig.args(raw)?.as_slice() {
        [Value::Bytes(name), Value::Bytes(item)] => Ok((name.clone(), item.clone())),
        _ => Err(sig.mismatch()),
    }
}

/// `list.append(list, item)` → the new length.
fn list_append(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (name, item) = name_item_args(&LIST_APPEND, raw)?;
    let key = key(b'l', &name);
    let mut items = load(txn, &key, false)?;
    items.push(item);
    let len = len_value(&items)?;
    txn.put(key, items_value(items).encode());
    Ok(len.encode())
}

/// `list.read(list)` → its items, oldest first.
fn list_read(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let name = name_arg(&LIST_READ, raw)?;
    Ok(items_value(load(txn, &key(b'l', &name), false)?).encode())
}

/// `list.len(list)` → how many items it holds.
fn list_len(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let name = name_arg(&LIST_LEN, raw)?;
    Ok(len_value(&load(txn, &key(b'l', &name), false)?)?.encode())
}

/// `set.add(set, item)` → whether the item was new.
fn set_add(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (name, item) = name_item_args(&SET_ADD, raw)?;
    let key = set_key(&name)?;
    let mut items = load(txn, &key, true)?;
    let Err(at) = items.binary_search(&item) else {
        return Ok(Value::Bool(false).encode());
    };
    items.insert(at, item);
    txn.put(key, items_value(items).encode());
    Ok(Value::Bool(true).encode())
}

/// `set.remove(set, item)` → whether the item was there.
fn set_remove(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (name, item) = name_item_args(&SET_REMOVE, raw)?;
    let key = set_key(&name)?;
    let mut items = load(txn, &key, true)?;
    let Ok(at) = items.binary_search(&item) else {
        return Ok(Value::Bool(false).encode());
    };
    items.remove(at);
    if items.is_empty() {
        txn.delete(key);
    } else {
        txn.put(key, items_value(items).encode());
    }
    Ok(Value::Bool(true).encode())
}

/// `set.contains(set, item)` → whether the item is there.
fn set_contains(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (name, item) = name_item_args(&SET_CONTAINS, raw)?;
    let items = load(txn, &set_key(&name)?, true)?;
    Ok(Value::Bool(items.binary_search(&item).is_ok()).encode())
}

/// `set.read(set)` → its items, sorted.
fn set_read(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let name = name_arg(&SET_READ, raw)?;
    Ok(items_value(load(txn, &set_key(&name)?, true)?).encode())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::key;
    use crate::builtins::testkit::Harness;
    use creek_types::value::{encode_args, Value};
    use creek_types::ProcCall;

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    fn list(items: &[&str]) -> Value {
        Value::List(items.iter().map(|s| b(s)).collect())
    }

    #[test]
    fn list_append_read_len() {
        let mut h = Harness::new();
        assert_eq!(h.ok("list.read", &[b("l")]), list(&[]));
        assert_eq!(h.ok("list.len", &[b("l")]), Value::Int(0));
        assert_eq!(h.ok("list.append", &[b("l"), b("x")]), Value::Int(1));
        assert_eq!(h.ok("list.append", &[b("l"), b("a")]), Value::Int(2));
        assert_eq!(h.ok("list.append", &[b("l"), b("x")]), Value::Int(3));
        assert_eq!(h.ok("list.read", &[b("l")]), list(&["x", "a", "x"]));
        assert_eq!(h.ok("list.len", &[b("l")]), Value::Int(3));
        assert_eq!(h.ok("list.read", &[b("other")]), list(&[]));
        let stored = h.snap.0.get(&key(b'l', b"l")).cloned();
        assert_eq!(stored, Some(list(&["x", "a", "x"]).encode()));
        assert_eq!(key(b'l', b"l"), Bytes::from_static(b"\x00ll"));
    }

    #[test]
    fn set_add_remove_contains_read() {
        let mut h = Harness::new();
        assert_eq!(h.ok("set.read", &[b("s")]), list(&[]));
        assert_eq!(h.ok("set.contains", &[b("s"), b("b")]), Value::Bool(false));
        assert_eq!(h.ok("set.add", &[b("s"), b("b")]), Value::Bool(true));
        assert_eq!(h.ok("set.add", &[b("s"), b("a")]), Value::Bool(true));
        assert_eq!(h.ok("set.add", &[b("s"), b("c")]), Value::Bool(true));
        let ex = h.exec(&ProcCall::new("set.add", encode_args(&[b("s"), b("a")])));
        assert_eq!(ex.outcome, Ok(Value::Bool(false).encode()));
        assert!(ex.writes.is_empty());
        assert_eq!(h.ok("set.read", &[b("s")]), list(&["a", "b", "c"]));
        assert_eq!(h.ok("set.contains", &[b("s"), b("b")]), Value::Bool(true));
        assert_eq!(h.ok("set.remove", &[b("s"), b("b")]), Value::Bool(true));
        assert_eq!(h.ok("set.remove", &[b("s"), b("b")]), Value::Bool(false));
        assert_eq!(h.ok("set.contains", &[b("s"), b("b")]), Value::Bool(false));
        assert_eq!(h.ok("set.read", &[b("s")]), list(&["a", "c"]));
        let stored = h.snap.0.get(&key(b's', b"s")).cloned();
        assert_eq!(stored, Some(list(&["a", "c"]).encode()));
        h.ok("set.remove", &[b("s"), b("a")]);
        h.ok("set.remove", &[b("s"), b("c")]);
        assert!(h.keys().is_empty());
    }

    /// A set whose key would be one of the session table's is refused and
    /// writes nothing.
    #[test]
    fn a_set_named_into_the_session_table_is_refused() {
        let mut h = Harness::new();
        for name in ["set.add", "set.read"] {
            let args = match name {
                "set.add" => encode_args(&[b("essions/horizon"), b("x")]),
                _ => encode_args(&[b("essions/horizon")]),
            };
            let ex = h.exec(&ProcCall::new(name, args));
            let abort = ex.outcome.expect_err("refused").0;
            assert!(abort.contains("reserved"), "{abort}");
            assert!(ex.writes.is_empty());
        }
        assert_eq!(
            h.ok("set.add", &[b("sessions/x"), b("x")]),
            Value::Bool(true)
        );
    }

    #[test]
    fn lists_and_sets_of_one_name_are_separate() {
        let mut h = Harness::new();
        h.ok("list.append", &[b("n"), b("x")]);
        h.ok("set.add", &[b("n"), b("y")]);
        h.ok("kv.put", &[b("n"), b("z")]);
        assert_eq!(h.ok("list.read", &[b("n")]), list(&["x"]));
        assert_eq!(h.ok("set.read", &[b("n")]), list(&["y"]));
        assert_eq!(h.ok("kv.get", &[b("n")]), b("z"));
    }

    #[test]
    fn read_only_procedures_write_nothing() {
        let mut h = Harness::new();
        h.ok("list.append", &[b("n"), b("x")]);
        h.ok("set.add", &[b("n"), b("y")]);
        for (name, args) in [
            ("list.read", vec![b("n")]),
            ("list.len", vec![b("n")]),
            ("set.read", vec![b("n")]),
            ("set.contains", vec![b("n"), b("y")]),
        ] {
            assert!(h.reg.get(name).is_some_and(|p| p.read_only), "{name}");
            let ex = h.exec(&ProcCall::new(name, encode_args(&args)));
            assert!(ex.outcome.is_ok() && ex.writes.is_empty(), "{name}");
        }
    }

    #[test]
    fn bad_arguments_are_rejected() {
        let mut h = Harness::new();
        assert_eq!(
            h.check("set.add", &[Value::from(&b"\x00s"[..]), b("x")]),
            Err("set.add: names starting with 0x00 are reserved".into())
        );
        assert!(h
            .call("list.append", &[Value::from(&b"\x00"[..]), b("x")])
            .is_err());
        assert_eq!(
            h.check("list.append", &[b("l")]),
            Err("list.append expects (list: bytes, item: bytes), got 1 argument".into())
        );
        assert!(h.check("set.read", &[b("s"), b("x")]).is_err());
        assert!(h.check("set.contains", &[b("s"), Value::Int(1)]).is_err());
        assert!(h.call("set.add", &[b("s"), list(&["x"])]).is_err());
        assert!(h.keys().is_empty());
    }

    #[test]
    fn corrupt_state_aborts() {
        let mut h = Harness::new();
        h.snap.0.insert(key(b's', b"s"), list(&["b", "a"]).encode());
        h.snap.0.insert(key(b'l', b"l"), Value::Int(1).encode());
        assert!(h.call("set.add", &[b("s"), b("c")]).is_err());
        assert!(h.call("set.read", &[b("s")]).is_err());
        assert!(h.call("list.append", &[b("l"), b("c")]).is_err());
        assert!(h.call("list.len", &[b("l")]).is_err());
    }
}
