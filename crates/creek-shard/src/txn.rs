//! Where a `kv.txn` runs on a cluster of shards: the keys its compares and
//! point ops name (docs/api.md, "Transactions"). Its range ops cover keys
//! on every shard, and its puts with a lease need the lease's group, so a
//! transaction with either cannot be routed; the replicas and the clients
//! read the keys the same way, here.

use bytes::Bytes;
use creek_types::value::Value;

/// The keys a `kv.txn` call names, as routing sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnKeys {
    /// Every key of its compares and its get, put and delete ops, each once,
    /// in the order they first appear.
    Keys(Vec<Bytes>),
    /// It has a range op (`scan`, `scan_reverse`, `delete_range`): its
    /// keys lie on every shard.
    Range,
    /// It puts a key with a lease: leases live in one shard's group.
    Lease,
    /// Not `kv.txn`'s shape (its own check refuses it).
    Malformed,
}

/// The keys of `kv.txn(compares, success, failure)` with arguments `args`.
pub fn txn_keys(args: &[Value]) -> TxnKeys {
    let [Value::List(compares), Value::List(success), Value::List(failure)] = args else {
        return TxnKeys::Malformed;
    };
    let mut keys: Vec<Bytes> = Vec::new();
    let mut add = |k: &Value| match k {
        Value::Bytes(k) => {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
            true
        }
        _ => false,
    };
    for compare in compares {
        match compare.as_list() {
            Some([k, ..]) if add(k) => {}
            _ => return TxnKeys::Malformed,
        }
    }
    for op in success.iter().chain(failure) {
        let Some([Value::Bytes(name), rest @ ..]) = op.as_list() else {
            return TxnKeys::Malformed;
        };
        match (name.as_ref(), rest) {
            (b"put", [_, _, _]) => return TxnKeys::Lease,
            (b"get" | b"put" | b"delete", [k, ..]) if add(k) => {}
            (b"scan" | b"scan_reverse" | b"delete_range", _) => return TxnKeys::Range,
            _ => return TxnKeys::Malformed,
        }
    }
    TxnKeys::Keys(keys)
}

/// Whether a `kv.txn` with arguments `args` compares a key's version,
/// revision or lease: those are records of the key's own shard, which a
/// transaction across shards cannot read on the others (the replicas
/// refuse it there).
pub fn txn_compares_records(args: &[Value]) -> bool {
    let Some(Value::List(compares)) = args.first() else {
        return false;
    };
    compares.iter().any(|c| match c.as_list() {
        Some([_, Value::Bytes(target), ..]) => target.as_ref() != b"value",
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    fn l(items: &[Value]) -> Value {
        Value::List(items.to_vec())
    }

    #[test]
    fn a_txn_names_the_keys_of_its_compares_and_point_ops() {
        let args = [
            l(&[l(&[b("a"), b("value"), b("="), b("1")])]),
            l(&[l(&[b("put"), b("b"), b("2")]), l(&[b("get"), b("a")])]),
            l(&[l(&[b("delete"), b("c")])]),
        ];
        let keys = ["a", "b", "c"].map(|k| Bytes::from(k.to_owned()));
        assert_eq!(txn_keys(&args), TxnKeys::Keys(keys.to_vec()));
        let ranged = [
            l(&[]),
            l(&[l(&[b("scan"), b("a"), Value::Nil, Value::Int(5)])]),
            l(&[]),
        ];
        assert_eq!(txn_keys(&ranged), TxnKeys::Range);
        let leased = [
            l(&[]),
            l(&[l(&[b("put"), b("a"), b("v"), Value::Int(3)])]),
            l(&[]),
        ];
        assert_eq!(txn_keys(&leased), TxnKeys::Lease);
        assert_eq!(txn_keys(&[l(&[]), l(&[])]), TxnKeys::Malformed);
        assert!(!txn_compares_records(&args));
        let versioned = [
            l(&[l(&[b("a"), b("mod"), b("<"), Value::Int(4)])]),
            l(&[]),
            l(&[]),
        ];
        assert!(txn_compares_records(&versioned));
        assert_eq!(
            txn_keys(&[l(&[]), l(&[]), l(&[])]),
            TxnKeys::Keys(Vec::new())
        );
    }
}
