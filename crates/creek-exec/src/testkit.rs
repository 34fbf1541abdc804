//! Procedures for the executor's own tests: a few key-value procedures
//! over [`Txn`], so the engines are tested without the procedure room
//! (which sits above this crate).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_types::value::{decode_args_shared, Value};
use creek_types::ProcCall;

use crate::procedures::Procedures;
use crate::txn::{Abort, Executed, Outcome, SnapshotRead, Txn, TxnLimits};

type Body = fn(&mut Txn<'_>, &Bytes) -> Outcome;

/// `kv.get`, `kv.put`, `kv.delete` and `kv.incr` with the built-ins'
/// results, plus whatever a test registers.
#[derive(Debug)]
pub(crate) struct TestProcs(BTreeMap<&'static str, (bool, Body)>);

impl TestProcs {
    pub(crate) fn new() -> Self {
        let mut p = TestProcs(BTreeMap::new());
        p.register("kv.get", true, get);
        p.register("kv.put", false, put);
        p.register("kv.delete", false, delete);
        p.register("kv.incr", false, incr);
        p
    }

    /// Add (or replace) `name`.
    pub(crate) fn register(&mut self, name: &'static str, read_only: bool, body: Body) {
        self.0.insert(name, (read_only, body));
    }
}

impl Procedures for TestProcs {
    fn execute(&self, snapshot: &dyn SnapshotRead, limits: TxnLimits, call: &ProcCall) -> Executed {
        let Some(&(read_only, body)) = self.0.get(call.name.as_ref()) else {
            let txn = Txn::new(snapshot, limits, true);
            return txn.finish(Err(Abort::new(format!("unknown procedure {}", call.name))));
        };
        let mut txn = Txn::new(snapshot, limits, read_only);
        let result = body(&mut txn, &call.args);
        txn.finish(result)
    }
}

fn args<const N: usize>(raw: &Bytes) -> Result<[Value; N], Abort> {
    let args = decode_args_shared(raw).map_err(|e| Abort::new(e.to_string()))?;
    args.try_into()
        .map_err(|_| Abort::new(format!("expected {N} arguments")))
}

fn key(v: &Value) -> Result<Bytes, Abort> {
    v.as_bytes()
        .cloned()
        .ok_or_else(|| Abort::new("key must be bytes"))
}

fn get(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let [k] = args(raw)?;
    Ok(txn.get(&key(&k)?).map_or(Value::Nil, Value::Bytes).encode())
}

fn put(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let [k, v] = args(raw)?;
    txn.put(key(&k)?, key(&v)?);
    Ok(Value::Nil.encode())
}

fn delete(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let [k] = args(raw)?;
    let k = key(&k)?;
    let existed = txn.get(&k).is_some();
    if existed {
        txn.delete(k);
    }
    Ok(Value::Bool(existed).encode())
}

fn incr(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let [k, delta] = args(raw)?;
    let (k, delta) = (key(&k)?, delta.as_int().ok_or_else(|| Abort::new("delta"))?);
    let current = match txn.get(&k) {
        None => 0,
        Some(stored) => std::str::from_utf8(&stored)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| Abort::new("value of key is not an integer"))?,
    };
    let new = current
        .checked_add(delta)
        .ok_or_else(|| Abort::new("overflow"))?;
    txn.put(k, Bytes::from(new.to_string()));
    Ok(Value::Int(new).encode())
}
