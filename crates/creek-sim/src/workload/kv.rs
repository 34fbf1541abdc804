//! `kv`: registers and counters over the built-in `kv.*` procedures.
//!
//! Registers `r0..r{keys-1}` are read with `kv.get`, written with `kv.put`
//! and `kv.cas` (every written value is unique: `c{client}-{n}`), read a
//! range at a time with `kv.scan` (or from its end down with
//! `kv.scan_reverse`), and now and then deleted with
//! `kv.delete_range` over the range of one register, and two at a time
//! with `kv.txn` (if register `i` holds the value last generated for it,
//! put one fresh value into `i` and `i + 1`, else read `i`); counters
//! `n0..n{keys-1}` are bumped by one with `kv.incr`. (Every final view, a
//! scan's included, must also equal a sequential replay of the committed
//! order: the run's `replay_matches`, which is what shows a scan
//! phantom-safe.)
//!
//! Invariants:
//! - a final view of `kv.get` on a register returns nil or a value some
//!   `kv.put`/`kv.cas` wrote to that register; so does the committed state;
//! - a final view of `kv.scan` over registers is a page of at most its
//!   limit registers, in ascending key order, within its range, each with
//!   a value some write gave it, and a next key only if the page is full;
//! - a final view of `kv.txn` is `[true, [nil, nil]]` (both puts ran) or
//!   `[false, [v]]` with `v` nil or a value some write gave register `i`
//!   (its atomicity and the branch it took are what `replay_matches` and
//!   `linearizable`, which see both its keys, check against the order);
//! - a counter's committed value lies between the increments known to be
//!   applied (final view with a result) and those possibly applied (every
//!   invocation without a final abort or result).
//!
//! With transactions on, registers are also read with their version
//! records (`kv.get_meta`: a final view shows a written value, at least one
//! write, created no later than last written — or no record, on the
//! baselines, whose engines keep none) and written by transactions
//! comparing a register's version or mod revision; both are judged exactly
//! by `replay_matches` (the replay keeps version records), and left out of
//! `linearizable`, whose specification does not know revisions.
//!
//! With leases on (`WorkloadConfig::leases`), 12 % of ops are lease ops on keys of their own
//! (`leases`), checked by the lease invariants.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use creek_check::history::History;
use creek_procs::Registry;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

use super::{
    args_of, bounded, describe, final_result, first_bytes_arg, logical_ops, pick_mode, show,
    NextOp, Workload, WorkloadConfig,
};
use crate::rng::Rng;

/// `kv.get(key)`.
pub const GET: &str = "kv.get";
/// `kv.put(key, value)`.
pub const PUT: &str = "kv.put";
/// `kv.incr(key, delta)`.
pub const INCR: &str = "kv.incr";
/// `kv.cas(key, expected, new)`.
pub const CAS: &str = "kv.cas";
/// `kv.scan(from, to, limit)`.
pub const SCAN: &str = "kv.scan";
/// `kv.scan_reverse(from, to, limit)`: the last keys of the range, down.
pub const SCAN_REVERSE: &str = "kv.scan_reverse";
/// `kv.delete_range(from, to, limit)`.
pub const DELETE_RANGE: &str = "kv.delete_range";
/// `kv.txn(compares, success, failure)`.
pub const TXN: &str = "kv.txn";
/// `kv.get_meta(key)`: the value with its version record.
pub const GET_META: &str = "kv.get_meta";
/// The compare targets of a `kv.txn` besides the value.
const NUMBER_TARGETS: [&str; 4] = ["version", "create", "mod", "lease"];
/// Share of ops that are lease ops (`super::leases`), when the range
/// calls are on.
const LEASE_OPS_PERCENT: usize = 12;

/// The key of register `i`.
pub fn register_key(i: usize) -> Bytes {
    Bytes::from(format!("r{i}"))
}

/// The key of versioned register `i`: written only by transactions that
/// compare records, which the linearizability check leaves out (so it
/// leaves out every op on these registers, or their writes would be
/// missing from its specification).
pub fn versioned_key(i: usize) -> Bytes {
    Bytes::from(format!("v{i}"))
}

/// The key of counter `i`.
pub fn counter_key(i: usize) -> Bytes {
    Bytes::from(format!("n{i}"))
}

/// The `kv` workload.
#[derive(Clone, Debug)]
pub struct KvWorkload {
    keys: usize,
    strong_share: f64,
    final_share: f64,
    /// Scans, range deletes and transactions among the ops
    /// ([`WorkloadConfig::ranges`]: all three are refused or split on a
    /// cluster of shards).
    ranges: bool,
    /// Transactions among the ops ([`WorkloadConfig::txns`]).
    txns: bool,
    /// Operations across shards run (transactions over two shards'
    /// registers): the invariants hold over the whole cluster only.
    across_shards: bool,
    /// Values generated so far (makes every written value unique).
    next_value: u64,
    /// The last value generated for each register, used as a plausible
    /// `expected` of `kv.cas`.
    last_written: Vec<Option<Bytes>>,
    /// The lease part ([`WorkloadConfig::leases`]), if on.
    leases: Option<super::leases::LeaseOps>,
}

impl KvWorkload {
    /// The workload for `config` (`keys`, `strong_share`, `final_share`).
    pub fn new(config: &WorkloadConfig) -> Self {
        let keys = config.keys.max(1);
        KvWorkload {
            keys,
            strong_share: config.strong_share,
            final_share: config.final_share,
            ranges: config.ranges,
            txns: config.txns,
            across_shards: config.cross_shard > 0.0,
            next_value: 0,
            last_written: vec![None; keys],
            leases: config.leases.then(super::leases::LeaseOps::default),
        }
    }

    fn fresh_value(&mut self, client: u32) -> Bytes {
        self.next_value += 1;
        Bytes::from(format!("c{client}-{}", self.next_value))
    }
}

/// Where each written value went: register key → values.
fn written_values<'a>(
    calls: impl Iterator<Item = &'a ProcCall>,
) -> BTreeMap<Bytes, BTreeSet<Bytes>> {
    let mut written: BTreeMap<Bytes, BTreeSet<Bytes>> = BTreeMap::new();
    for call in calls {
        let values = match (call.name.as_ref(), args_of(call).as_deref()) {
            (PUT, Some([Value::Bytes(k), Value::Bytes(v)])) => vec![(k.clone(), v.clone())],
            (CAS, Some([Value::Bytes(k), _, Value::Bytes(v)])) => vec![(k.clone(), v.clone())],
            (TXN, Some([_, Value::List(success), _])) => success
                .iter()
                .filter_map(|op| match op.as_list() {
                    Some([Value::Bytes(put), Value::Bytes(k), Value::Bytes(v)])
                        if put.as_ref() == b"put" =>
                    {
                        Some((k.clone(), v.clone()))
                    }
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        for (k, v) in values {
            written.entry(k).or_default().insert(v);
        }
    }
    written
}

/// Why the outcome of scan `call` is not a page of written registers in
/// order (descending for `kv.scan_reverse`) within its range (`None`: it
/// is one).
fn bad_page(
    call: &ProcCall,
    result: Result<Value, String>,
    written: &BTreeMap<Bytes, BTreeSet<Bytes>>,
    incremented: &BTreeSet<Bytes>,
) -> Option<String> {
    let args = args_of(call);
    let Some([Value::Bytes(from), Value::Bytes(to), Value::Int(limit)]) = args.as_deref() else {
        return Some("not a scan of the workload's shape".into());
    };
    let limit = usize::try_from(*limit).unwrap_or(0);
    let reverse = call.name.as_ref() == SCAN_REVERSE;
    let page = match result {
        Ok(Value::List(two)) if two.len() == 2 => two,
        Ok(v) => return Some(format!("answered {v}, not [page, next]")),
        Err(e) => return Some(e),
    };
    let (Value::List(items), next) = (&page[0], &page[1]) else {
        return Some(format!("answered {}, not [page, next]", page[0]));
    };
    if items.len() > limit {
        return Some(format!("{} keys, over its limit of {limit}", items.len()));
    }
    if !matches!(next, Value::Nil) && items.len() < limit {
        return Some(format!(
            "a next key after a page of {} of {limit}",
            items.len()
        ));
    }
    let mut last: Option<&Bytes> = None;
    for item in items {
        let Some([Value::Bytes(k), Value::Bytes(v)]) = item.as_list() else {
            return Some(format!("an item {item} that is not [key, value]"));
        };
        let out_of_order = last.is_some_and(|l| if reverse { l <= k } else { l >= k });
        if k < from || k >= to || out_of_order {
            return Some(format!("key {} out of order or out of its range", show(k)));
        }
        last = Some(k);
        if !incremented.contains(k) && !written.get(k).is_some_and(|s| s.contains(v)) {
            return Some(format!(
                "{} = {}, which no kv.put or kv.cas wrote there",
                show(k),
                show(v)
            ));
        }
    }
    None
}

/// The registers a workload `kv.txn` names: the compared one first.
fn txn_keys(call: &ProcCall) -> Vec<Bytes> {
    let Some(args) = args_of(call) else {
        return Vec::new();
    };
    let mut keys: Vec<Bytes> = Vec::new();
    let mut add = |k: &Value| {
        if let Value::Bytes(k) = k {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    };
    for list in &args {
        for item in list.as_list().unwrap_or_default() {
            match item.as_list() {
                // A compare names its key first, an op second.
                Some([k, Value::Bytes(t), ..])
                    if t.as_ref() == b"value"
                        || NUMBER_TARGETS.iter().any(|n| n.as_bytes() == t.as_ref()) =>
                {
                    add(k)
                }
                Some([_, k, ..]) => add(k),
                _ => {}
            }
        }
    }
    keys
}

/// Whether a `kv.txn` compares a version, revision or lease: the
/// linearizability check's specification does not know them (only the
/// replay of the committed order does).
fn compares_numbers(call: &ProcCall) -> bool {
    let Some(args) = args_of(call) else {
        return false;
    };
    let compares = args.first().and_then(Value::as_list).unwrap_or_default();
    compares.iter().any(|c| {
        matches!(c.as_list(), Some([_, Value::Bytes(t), ..])
            if NUMBER_TARGETS.iter().any(|n| n.as_bytes() == t.as_ref()))
    })
}

impl KvWorkload {
    /// If versioned register `i`'s version or mod revision compares with a
    /// small number as drawn, one fresh value into versioned registers `i`
    /// and `i + 1`; else read register `i` (the shape of
    /// [`KvWorkload::txn`]'s answers).
    fn version_txn(&mut self, rng: &mut Rng, i: usize, client: u32) -> ProcCall {
        let j = (i + 1) % self.keys;
        let (ki, kj) = (versioned_key(i), versioned_key(j));
        let v = self.fresh_value(client);
        let target = ["version", "mod"][rng.index(2)];
        let cmp = ["=", ">", "<"][rng.index(3)];
        let n = Value::Int(rng.index(3) as i64);
        put_both_else_get(&ki, &kj, &v, (target, cmp, n))
    }

    /// If register `i` holds the value last generated for it, one fresh
    /// value into registers `i` and `i + 1`; else read register `i`.
    fn txn(&mut self, i: usize, client: u32) -> ProcCall {
        let j = (i + 1) % self.keys;
        let (ki, kj) = (register_key(i), register_key(j));
        let expected = self.last_written[i]
            .clone()
            .map_or(Value::Nil, Value::Bytes);
        let v = self.fresh_value(client);
        self.last_written[i] = Some(v.clone());
        self.last_written[j] = Some(v.clone());
        put_both_else_get(&ki, &kj, &v, ("value", "=", expected))
    }
}

/// `kv.txn`: if `ki`'s `target` compares with `operand` as `cmp` says, put
/// `v` into `ki` and `kj`, else read `ki`.
fn put_both_else_get(
    ki: &Bytes,
    kj: &Bytes,
    v: &Bytes,
    (target, cmp, operand): (&str, &str, Value),
) -> ProcCall {
    let op = |items: &[Value]| Value::List(items.to_vec());
    let key = |k: &Bytes| Value::Bytes(k.clone());
    let compare = op(&[key(ki), Value::from(target), Value::from(cmp), operand]);
    let put = |k: &Bytes| op(&[Value::from("put"), key(k), key(v)]);
    let success = op(&[put(ki), put(kj)]);
    let failure = op(&[op(&[Value::from("get"), key(ki)])]);
    ProcCall::new(TXN, encode_args(&[op(&[compare]), success, failure]))
}

/// The counter and delta of a `kv.incr` call.
fn incr_args(call: &ProcCall) -> Option<(Bytes, i64)> {
    if call.name.as_ref() != INCR {
        return None;
    }
    match args_of(call).as_deref() {
        Some([Value::Bytes(k), Value::Int(d)]) => Some((k.clone(), *d)),
        _ => None,
    }
}

impl Workload for KvWorkload {
    fn name(&self) -> &'static str {
        "kv"
    }

    fn register(&self, _registry: &mut Registry) {}

    fn setup(&self) -> Vec<ProcCall> {
        Vec::new()
    }

    fn next_op(&mut self, rng: &mut Rng, client: u32) -> NextOp {
        if let Some(leases) = self.leases.as_mut() {
            if rng.index(100) < LEASE_OPS_PERCENT {
                return leases.next_op(rng, client);
            }
        }
        let (strong, wants_final) = pick_mode(rng, self.strong_share, self.final_share);
        let roll = rng.index(100);
        let i = rng.index(self.keys);
        let call = if roll < 35 {
            ProcCall::new(GET, encode_args(&[Value::Bytes(register_key(i))]))
        } else if roll < 65 {
            let v = self.fresh_value(client);
            self.last_written[i] = Some(v.clone());
            ProcCall::new(
                PUT,
                encode_args(&[Value::Bytes(register_key(i)), Value::Bytes(v)]),
            )
        } else if roll < 85 {
            ProcCall::new(
                INCR,
                encode_args(&[Value::Bytes(counter_key(i)), Value::Int(1)]),
            )
        } else if roll < 90 && self.ranges {
            // From a register to the end of the registers (`s` follows
            // every `r…` key), a page of some of them.
            let limit = 1 + rng.index(self.keys) as i64;
            // Every other register's scans go down from the end.
            ProcCall::new(
                if i % 2 == 1 { SCAN_REVERSE } else { SCAN },
                encode_args(&[
                    Value::Bytes(register_key(i)),
                    Value::from("s"),
                    Value::Int(limit),
                ]),
            )
        } else if roll < 91 && self.ranges {
            // The range of one register (nothing sorts between `r1` and
            // `r1\0`), so the linearizability check, which follows each
            // key alone, can place it.
            let key = register_key(i);
            let mut end = key.to_vec();
            end.push(0);
            ProcCall::new(
                DELETE_RANGE,
                encode_args(&[Value::Bytes(key), Value::Bytes(end.into()), Value::Int(2)]),
            )
        } else if roll < 93 && self.txns {
            self.txn(i, client)
        } else if roll < 94 && self.txns && !self.across_shards {
            // Records are each shard's own: a cluster of shards refuses a
            // transaction comparing them across shards.
            self.version_txn(rng, i, client)
        } else if roll < 95 && self.txns {
            let key = if rng.index(2) == 0 {
                versioned_key(i)
            } else {
                register_key(i)
            };
            ProcCall::new(GET_META, encode_args(&[Value::Bytes(key)]))
        } else {
            let expected = self.last_written[i]
                .clone()
                .map_or(Value::Nil, Value::Bytes);
            let v = self.fresh_value(client);
            self.last_written[i] = Some(v.clone());
            ProcCall::new(
                CAS,
                encode_args(&[Value::Bytes(register_key(i)), expected, Value::Bytes(v)]),
            )
        };
        NextOp {
            call,
            strong,
            wants_final,
        }
    }

    fn keys(&self, call: &ProcCall) -> Vec<Bytes> {
        match call.name.as_ref() {
            // Leased keys change by expiry, an op no client invoked: they
            // have their own checks (`leases`).
            GET | PUT if first_bytes_arg(call).is_some_and(|k| super::leases::is_lease_key(&k)) => {
                Vec::new()
            }
            GET | PUT | INCR | CAS | DELETE_RANGE => first_bytes_arg(call).into_iter().collect(),
            // Version records follow the committed order: the replay of
            // the order judges their final views, not this specification,
            // which leaves out every op on the registers they write.
            TXN if compares_numbers(call) => Vec::new(),
            TXN => txn_keys(call),
            _ => Vec::new(),
        }
    }

    fn check_shard(
        &self,
        _map: &creek_shard::ShardMap,
        _shard: creek_shard::ShardId,
        history: &History,
        committed_state: &BTreeMap<Bytes, Bytes>,
    ) -> Vec<String> {
        if self.across_shards {
            // A transaction over two shards wrote registers of both: one
            // shard's history does not see every write of its registers
            // (the whole cluster's check does, with each MPO as its call).
            return Vec::new();
        }
        self.check(history, committed_state)
    }

    fn check(&self, history: &History, committed_state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        let setup = self.setup();
        let all_calls = || setup.iter().chain(history.ops.iter().map(|op| &op.call));
        let written = written_values(all_calls());
        let incremented: BTreeSet<Bytes> = all_calls()
            .filter_map(|c| incr_args(c).map(|(k, _)| k))
            .collect();
        let mut out = Vec::new();

        // Final reads return a written value.
        for op in history.ops.iter().filter(|op| op.call.name.as_ref() == GET) {
            let (Some(key), Some(result)) = (first_bytes_arg(&op.call), final_result(op)) else {
                continue;
            };
            if incremented.contains(&key) || super::leases::is_lease_key(&key) {
                continue;
            }
            let what = describe(op);
            match result {
                Ok(Value::Nil) => {}
                Ok(Value::Bytes(v)) if written.get(&key).is_some_and(|s| s.contains(&v)) => {}
                Ok(v) => out.push(format!(
                    "kv: final view of kv.get({}) by {what} returned {v}, which no kv.put or kv.cas wrote there",
                    show(&key)
                )),
                Err(e) => out.push(format!(
                    "kv: final view of kv.get({}) by {what}: {e}",
                    show(&key)
                )),
            }
        }

        // Final version reads: a written value, with a record that counts
        // at least one write, created no later than last written.
        for op in history
            .ops
            .iter()
            .filter(|op| op.call.name.as_ref() == GET_META)
        {
            let (Some(key), Some(result)) = (first_bytes_arg(&op.call), final_result(op)) else {
                continue;
            };
            let ok = match &result {
                Ok(Value::Nil) => true,
                Ok(Value::List(items)) => match items.as_slice() {
                    // All zero: an engine that keeps no records (the
                    // baselines'); Creek's are judged exactly by the replay.
                    [Value::Bytes(v), Value::Int(version), Value::Int(create), Value::Int(modified), Value::Int(0)] => {
                        written.get(&key).is_some_and(|s| s.contains(v))
                            && ((*version, *create, *modified) == (0, 0, 0)
                                || (*version >= 1 && 1 <= *create && create <= modified))
                    }
                    _ => false,
                },
                _ => false,
            };
            if !ok {
                out.push(format!(
                    "kv: final view of kv.get_meta({}) by {}: {}",
                    show(&key),
                    describe(op),
                    match result {
                        Ok(v) => format!("answered {v}"),
                        Err(e) => e,
                    }
                ));
            }
        }

        // Final scans: a page of written registers, in order, in range.
        for op in history
            .ops
            .iter()
            .filter(|op| [SCAN, SCAN_REVERSE].contains(&op.call.name.as_ref()))
        {
            let Some(result) = final_result(op) else {
                continue;
            };
            if let Some(why) = bad_page(&op.call, result, &written, &incremented) {
                out.push(format!(
                    "kv: final view of {} by {}: {why}",
                    op.call.name,
                    describe(op)
                ));
            }
        }

        // Final transactions: both puts, or the read of register i.
        for op in history.ops.iter().filter(|op| op.call.name.as_ref() == TXN) {
            let Some(result) = final_result(op) else {
                continue;
            };
            let first = txn_keys(&op.call).into_iter().next().unwrap_or_default();
            let ok = match &result {
                Ok(Value::List(two)) => match two.as_slice() {
                    [Value::Bool(true), Value::List(r)] => {
                        r.len() == 2 && r.iter().all(|v| matches!(v, Value::Nil))
                    }
                    [Value::Bool(false), Value::List(r)] => match r.as_slice() {
                        [Value::Nil] => true,
                        [Value::Bytes(v)] => written.get(&first).is_some_and(|s| s.contains(v)),
                        _ => false,
                    },
                    _ => false,
                },
                _ => false,
            };
            if !ok {
                out.push(format!(
                    "kv: final view of kv.txn by {}: {}",
                    describe(op),
                    match result {
                        Ok(v) => format!("answered {v}"),
                        Err(e) => e,
                    }
                ));
            }
        }

        // Committed registers hold a written value.
        let registers: BTreeSet<Bytes> = (0..self.keys)
            .map(register_key)
            .chain(written.keys().cloned())
            .filter(|k| !incremented.contains(k))
            .collect();
        for key in &registers {
            if let Some(v) = committed_state.get(key) {
                if !written.get(key).is_some_and(|s| s.contains(v)) {
                    out.push(format!(
                        "kv: committed {} = {}, which no kv.put or kv.cas wrote there",
                        show(key),
                        show(v)
                    ));
                }
            }
        }

        // Counters: applied ≤ committed value ≤ possibly applied (bounds on
        // the sum of deltas; an op without a final view may or may not have
        // been applied, one with a final abort was not).
        let mut bounds: BTreeMap<Bytes, (i128, i128)> =
            (0..self.keys).map(|i| (counter_key(i), (0, 0))).collect();
        for call in &setup {
            if let Some((k, d)) = incr_args(call) {
                let b = bounds.entry(k).or_default();
                b.0 += i128::from(d.min(0));
                b.1 += i128::from(d.max(0));
            }
        }
        for group in logical_ops(history) {
            let Some((k, d)) = group.first().and_then(|op| incr_args(&op.call)) else {
                continue;
            };
            let d = i128::from(d);
            let finals: Vec<bool> = group
                .iter()
                .filter_map(|op| op.final_view().map(|v| v.outcome.is_ok()))
                .collect();
            let b = bounds.entry(k).or_default();
            if finals.contains(&true) {
                b.0 += d;
                b.1 += d;
            } else if finals.is_empty() {
                b.0 += d.min(0);
                b.1 += d.max(0);
            }
        }
        for (key, (lo, hi)) in &bounds {
            let value = match committed_state.get(key) {
                None => 0,
                Some(raw) => match std::str::from_utf8(raw)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                {
                    Some(n) => i128::from(n),
                    None => {
                        out.push(format!(
                            "kv: committed counter {} = {} is not an integer",
                            show(key),
                            show(raw)
                        ));
                        continue;
                    }
                },
            };
            if value < *lo || value > *hi {
                out.push(format!(
                    "kv: committed counter {} = {value}, outside [{lo}, {hi}] (increments with a final view .. increments invoked)",
                    show(key)
                ));
            }
        }
        super::leases::check(history, committed_state, &mut out);
        bounded(out)
    }
}

#[cfg(test)]
mod tests {
    use creek_core::ViewKind;
    use creek_exec::Abort;

    use super::*;
    use crate::workload::leases;
    use crate::workload::testkit::{call, history, record, run_sequential, stable};

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    fn state(pairs: &[(&str, &str)]) -> BTreeMap<Bytes, Bytes> {
        pairs
            .iter()
            .map(|(k, v)| (Bytes::from(k.to_string()), Bytes::from(v.to_string())))
            .collect()
    }

    fn w() -> KvWorkload {
        KvWorkload::new(&WorkloadConfig {
            keys: 2,
            leases: true,
            ..WorkloadConfig::default()
        })
    }

    fn honest_ops() -> Vec<creek_check::history::OpRecord> {
        vec![
            stable(1, call(PUT, &[b("r0"), b("c0-1")]), Value::Nil),
            stable(2, call(GET, &[b("r0")]), b("c0-1")),
            stable(3, call(GET, &[b("r1")]), Value::Nil),
            stable(
                4,
                call(CAS, &[b("r0"), b("c0-1"), b("c0-2")]),
                Value::Bool(true),
            ),
            stable(5, call(GET, &[b("r0")]), b("c0-2")),
            stable(6, call(INCR, &[b("n0"), Value::Int(1)]), Value::Int(1)),
            // No final view: may or may not have been applied.
            record(7, call(INCR, &[b("n0"), Value::Int(1)]), vec![]),
            // A tentative view of an unwritten value is not checked.
            record(
                8,
                call(GET, &[b("r1")]),
                vec![(ViewKind::Tentative, Ok(b("zzz").encode()))],
            ),
            record(
                9,
                call(INCR, &[b("n1"), Value::Int(1)]),
                vec![(ViewKind::Stable, Err(Abort::new("x")))],
            ),
        ]
    }

    #[test]
    fn honest_history_passes() {
        let h = history(honest_ops());
        for n0 in ["1", "2"] {
            let s = state(&[("r0", "c0-2"), ("n0", n0)]);
            assert_eq!(w().check(&h, &s), Vec::<String>::new());
        }
    }

    #[test]
    fn violations_are_flagged() {
        let mut ops = honest_ops();
        ops.push(stable(10, call(GET, &[b("r1")]), b("c0-1")));
        let h = history(ops);
        let out = w().check(&h, &state(&[("r0", "c0-2"), ("n0", "1")]));
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("kv.get(\"r1\") by op r0.10"), "{out:?}");

        let h = history(honest_ops());
        let out = w().check(&h, &state(&[("r0", "c9-9"), ("n0", "3"), ("n1", "1")]));
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(out[0].contains("committed \"r0\" = \"c9-9\""), "{out:?}");
        assert!(out[1].contains("\"n0\" = 3, outside [1, 2]"), "{out:?}");
        assert!(out[2].contains("\"n1\" = 1, outside [0, 0]"), "{out:?}");
        let out = w().check(&h, &state(&[("r0", "c0-2")]));
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("\"n0\" = 0, outside [1, 2]"), "{out:?}");
    }

    fn page(items: &[(&str, &str)], next: Value) -> Value {
        let items = items
            .iter()
            .map(|(k, v)| Value::List(vec![b(k), b(v)]))
            .collect();
        Value::List(vec![Value::List(items), next])
    }

    #[test]
    fn scans_return_pages_of_written_registers_in_order() {
        let scan = |limit| call(SCAN, &[b("r0"), b("s"), Value::Int(limit)]);
        let mut ops = honest_ops();
        ops.push(stable(10, scan(2), page(&[("r0", "c0-2")], Value::Nil)));
        ops.push(stable(11, scan(1), page(&[("r0", "c0-2")], b("r0\0"))));
        let s = state(&[("r0", "c0-2"), ("n0", "1")]);
        assert_eq!(w().check(&history(ops), &s), Vec::<String>::new());
        for (bad, says) in [
            (
                page(&[("r0", "c9-9")], Value::Nil),
                "which no kv.put or kv.cas wrote",
            ),
            (
                page(&[("r0", "c0-2"), ("r0", "c0-1")], Value::Nil),
                "out of order",
            ),
            (page(&[("q", "c0-1")], Value::Nil), "out of its range"),
            (
                page(
                    &[("r0", "c0-1"), ("r0", "c0-2"), ("r0", "c0-2")],
                    Value::Nil,
                ),
                "over its limit",
            ),
            (page(&[], b("r0\0")), "a next key after a page of 0"),
        ] {
            let mut ops = honest_ops();
            ops.push(stable(10, scan(2), bad));
            let out = w().check(&history(ops), &s);
            assert_eq!(out.len(), 1, "{out:?}");
            assert!(out[0].contains(says), "{says}: {out:?}");
        }
    }

    #[test]
    fn transactions_answer_both_puts_or_a_written_value() {
        let mut wl = w();
        let txn = wl.txn(0, 0);
        assert_eq!(
            wl.keys(&txn),
            vec![Bytes::from_static(b"r0"), Bytes::from_static(b"r1")]
        );
        let s = state(&[("r0", "c0-2"), ("n0", "1")]);
        let l = |items: &[Value]| Value::List(items.to_vec());
        let good = [
            l(&[Value::Bool(true), l(&[Value::Nil, Value::Nil])]),
            l(&[Value::Bool(false), l(&[b("c0-2")])]),
            l(&[Value::Bool(false), l(&[Value::Nil])]),
        ];
        for answer in good {
            let mut ops = honest_ops();
            ops.push(stable(10, txn.clone(), answer));
            assert_eq!(wl.check(&history(ops), &s), Vec::<String>::new());
        }
        let bad = [
            l(&[Value::Bool(true), l(&[Value::Nil])]),
            l(&[Value::Bool(false), l(&[b("c9-9")])]),
            Value::Nil,
        ];
        for answer in bad {
            let mut ops = honest_ops();
            ops.push(stable(10, txn.clone(), answer.clone()));
            let out = wl.check(&history(ops), &s);
            assert_eq!(out.len(), 1, "{answer}: {out:?}");
            assert!(out[0].contains("kv.txn"), "{out:?}");
        }
    }

    #[test]
    fn keys_are_the_key_argument() {
        let w = w();
        assert_eq!(
            w.keys(&call(CAS, &[b("r1"), Value::Nil, b("x")])),
            vec![Bytes::from_static(b"r1")]
        );
        assert!(w.keys(&call("list.read", &[b("r1")])).is_empty());
    }

    #[test]
    fn sequential_run_passes() {
        let mut w = w();
        let (state, h) = run_sequential(&mut w, 7, 400);
        assert_eq!(w.check(&h, &state), Vec::<String>::new());
        let names: BTreeSet<&str> = h
            .ops
            .iter()
            .map(|op| op.call.name.as_ref())
            .filter(|n| *n != leases::REVOKE)
            .collect();
        assert_eq!(
            names,
            BTreeSet::from([
                GET,
                PUT,
                INCR,
                CAS,
                SCAN,
                SCAN_REVERSE,
                DELETE_RANGE,
                TXN,
                GET_META,
                leases::GRANT,
                leases::KEEP_ALIVE,
                leases::PUT_TTL
            ])
        );
        let both = h
            .ops
            .iter()
            .filter(|op| op.call.name.as_ref() == TXN)
            .filter(|op| matches!(final_result(op), Some(Ok(Value::List(r))) if r[0] == Value::Bool(true)))
            .count();
        assert!(both > 0, "no transaction swapped");
        let scanned = h
            .ops
            .iter()
            .filter(|op| op.call.name.as_ref() == SCAN)
            .filter(|op| {
                matches!(final_result(op), Some(Ok(Value::List(p))) if p[0].as_list().is_some_and(|i| !i.is_empty()))
            })
            .count();
        assert!(scanned > 0, "no scan found a register");
        let swapped = h
            .ops
            .iter()
            .filter(|op| op.call.name.as_ref() == CAS)
            .filter(|op| matches!(final_result(op), Some(Ok(Value::Bool(true)))))
            .count();
        assert!(swapped > 0);
        assert!(h.ops.iter().any(|op| op.strong) && h.ops.iter().any(|op| !op.strong));
    }
}
