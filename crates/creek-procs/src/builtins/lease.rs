//! Leases: keys that live only while their holder keeps them alive (etcd's
//! leases, Redis's `EXPIRE`), docs/api.md "Leases".
//!
//! A lease is a replicated record: its granted TTL and its *deadline*, a
//! time in µs on the ops' hybrid logical clocks (the physical part an op
//! gets where it is created, [`ProcCall::time_us`]). `lease.grant` sets the
//! deadline to its op's time plus the TTL, each `lease.keep_alive` moves it
//! to its own op's time plus the TTL, and a key put with the lease
//! (`kv.put key value lease`) is *attached* to it. Expiry is an op in the
//! order like any other: the leader, scanning the committed records (the
//! replica's `expire_leases`), orders a strong [`EXPIRE`] op naming the
//! leases whose deadline its clock passed; the op checks each deadline
//! again against its own time, at its place in the order, and deletes the
//! leases still due with every key attached to them. So every replica
//! removes the same keys at the same point of the committed order, and a
//! keep-alive committed before the expiry op saves the lease.
//!
//! A new leader first orders an [`EXTEND`] op that moves every live
//! lease's deadline to at least its op's time plus the TTL, as etcd's new
//! leader does: deadlines were set on other replicas' clocks, and this
//! bounds how early a lease can expire through clock skew between the old
//! leader and the new one (by less than one TTL).
//!
//! Attachments: a key's lease is `\0lease/of/<key>`; a lease's keys are
//! indexed under `\0lease/k/<id><key>`. Writing a key without a lease
//! (`kv.put`, `kv.mput`, `kv.cas`, a txn's put) or deleting it detaches it,
//! as a put without `--lease` does in etcd and `SET` does in Redis;
//! `kv.incr` and `kv.transfer` keep the key's lease (as Redis's `INCR`
//! keeps its TTL).
//!
//! Grants and keep-alives run at the strong level only: a lease's id and
//! its deadline are what the committed order decided, and a holder measures
//! its lease from the keep-alives whose final view it saw.

use bytes::{BufMut, Bytes, BytesMut};

use super::{describe_all, Sig, Subject, Ty};
use crate::registry::{Registry, Route};
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::planted::{Bug, PlantedBugs};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

/// Shortest TTL a lease may be granted, in seconds.
pub const TTL_MIN_S: i64 = 1;
/// Longest TTL a lease may be granted, in seconds (one year).
pub const TTL_MAX_S: i64 = 365 * 24 * 3600;
/// Most live leases a group holds; a grant past it is refused (one scan
/// page of the default transaction limits, so `lease.list` and a new
/// leader's extension see them all).
pub const LEASES_MAX: u64 = 10_000;
/// Most attached keys one expiry (or revoke) op deletes; a lease with more
/// keeps its record, marked revoked, until later expiry ops deleted the rest.
pub const KEYS_PER_OP: usize = 1_000;
/// Most leases one [`EXPIRE`] op names.
pub const EXPIRE_BATCH_MAX: usize = 256;
/// Most keys `lease.ttl` lists.
pub const TTL_KEYS_MAX: usize = 1_000;

/// How early the planted bug `lease-early-expiry` expires leases, in µs.
pub const PLANTED_EARLY_US: u64 = 700_000;

/// The internal procedure the leader orders to expire due leases.
pub const EXPIRE: &str = "creek.lease.expire";
/// The internal procedure a new leader orders to extend every live lease.
pub const EXTEND: &str = "creek.lease.extend";

/// Prefix of the lease records (`<id: 8 bytes, big-endian>` follows).
pub const RECORD_PREFIX: &[u8] = b"\0tlease/r/";
/// The count of lease records.
pub const LIVE_KEY: &[u8] = b"\0tlease/live";
const NEXT_KEY: &[u8] = b"\0tlease/next";
const KEYS_PREFIX: &[u8] = b"\0tlease/k/";
const OF_PREFIX: &[u8] = b"\0tlease/of/";

const GRANT: Sig = Sig {
    name: "lease.grant",
    params: &[("ttl", Ty::Int)],
    subject: Subject::None,
};
const KEEP_ALIVE: Sig = Sig {
    name: "lease.keep_alive",
    params: &[("lease", Ty::Int)],
    subject: Subject::None,
};
const REVOKE: Sig = Sig {
    name: "lease.revoke",
    params: &[("lease", Ty::Int)],
    subject: Subject::None,
};
const TTL: Sig = Sig {
    name: "lease.ttl",
    params: &[("lease", Ty::Int)],
    subject: Subject::None,
};
const LIST: Sig = Sig {
    name: "lease.list",
    params: &[],
    subject: Subject::None,
};
/// `kv.put`'s three-argument form: a key attached to a lease.
pub(super) const PUT_LEASE: Sig = Sig {
    name: "kv.put",
    params: &[("key", Ty::Bytes), ("value", Ty::Bytes), ("lease", Ty::Int)],
    subject: Subject::Key,
};
const PUT_TTL: Sig = Sig {
    name: "kv.put_ttl",
    params: &[("key", Ty::Bytes), ("value", Ty::Bytes), ("ttl", Ty::Int)],
    subject: Subject::Key,
};
const STRONG_ONLY: &[&str] = &[GRANT.name, KEEP_ALIVE.name];

/// A lease record: its granted TTL and its deadline (0 once revoked, while
/// its keys are being deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The TTL it was granted, in seconds.
    pub ttl_s: u64,
    /// When it expires, in µs on the ops' clocks; 0 once revoked.
    pub deadline_us: u64,
}

impl Record {
    fn encode(self) -> Bytes {
        let mut b = BytesMut::with_capacity(16);
        b.put_u64(self.ttl_s);
        b.put_u64(self.deadline_us);
        b.freeze()
    }

    /// Decode a record's value.
    pub fn decode(b: &[u8]) -> Option<Record> {
        let ttl_s = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        let deadline_us = u64::from_be_bytes(b.get(8..16)?.try_into().ok()?);
        Some(Record { ttl_s, deadline_us })
    }

    /// Whether the record is due for deletion at `now_us`.
    pub fn due(&self, now_us: u64) -> bool {
        self.deadline_us <= now_us
    }

    fn ttl_us(&self) -> u64 {
        self.ttl_s.saturating_mul(1_000_000)
    }
}

/// The key of lease `id`'s record.
pub fn record_key(id: u64) -> Bytes {
    let mut k = BytesMut::with_capacity(RECORD_PREFIX.len() + 8);
    k.put_slice(RECORD_PREFIX);
    k.put_u64(id);
    k.freeze()
}

/// The lease id a record key names.
pub fn parse_record_key(key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(RECORD_PREFIX)?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

fn keys_prefix(id: u64) -> Bytes {
    let mut k = BytesMut::with_capacity(KEYS_PREFIX.len() + 8);
    k.put_slice(KEYS_PREFIX);
    k.put_u64(id);
    k.freeze()
}

fn index_key(id: u64, key: &[u8]) -> Bytes {
    let mut k = BytesMut::with_capacity(KEYS_PREFIX.len() + 8 + key.len());
    k.put_slice(KEYS_PREFIX);
    k.put_u64(id);
    k.put_slice(key);
    k.freeze()
}

fn of_key(key: &[u8]) -> Bytes {
    let mut k = BytesMut::with_capacity(OF_PREFIX.len() + key.len());
    k.put_slice(OF_PREFIX);
    k.put_slice(key);
    k.freeze()
}

/// The first key past every key starting with `prefix` (an internal
/// prefix, never all 0xff bytes).
pub fn prefix_end(prefix: &[u8]) -> Bytes {
    Bytes::from(creek_shard::prefix_end(prefix).unwrap_or_else(|| vec![0xff; prefix.len() + 1]))
}

fn read_u64(txn: &mut Txn<'_>, key: &'static [u8]) -> u64 {
    txn.get(key)
        .and_then(|b| Some(u64::from_be_bytes(b.as_ref().try_into().ok()?)))
        .unwrap_or(0)
}

fn write_u64(txn: &mut Txn<'_>, key: &'static [u8], v: u64) {
    txn.put(
        Bytes::from_static(key),
        Bytes::copy_from_slice(&v.to_be_bytes()),
    );
}

/// A lease id argument: positive (etcd's ids are positive int64s).
fn lease_id(v: i64) -> Result<u64, String> {
    u64::try_from(v)
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| format!("lease id must be positive, got {v}"))
}

fn ttl_arg(name: &str, v: i64) -> Result<u64, String> {
    if !(TTL_MIN_S..=TTL_MAX_S).contains(&v) {
        return Err(format!(
            "{name}: ttl must be within {TTL_MIN_S}..={TTL_MAX_S} seconds, got {v}"
        ));
    }
    Ok(v as u64)
}

fn not_found(id: u64) -> Abort {
    Abort::new(format!(
        "lease {id} not found: it expired, was revoked or was never granted"
    ))
}

/// Lease `id`'s record if it is live at `now_us` (granted, not revoked,
/// its deadline not passed).
fn live(txn: &mut Txn<'_>, id: u64, now_us: u64) -> Result<Record, Abort> {
    txn.get(&record_key(id))
        .and_then(|v| Record::decode(&v))
        .filter(|r| !r.due(now_us))
        .ok_or_else(|| not_found(id))
}

/// Register the lease procedures.
pub(super) fn register(r: &mut Registry) {
    r.register_fn(GRANT.name, false, |a| check_ttl_sig(&GRANT, a), outside);
    r.register_fn(
        KEEP_ALIVE.name,
        false,
        |a| check_id(&KEEP_ALIVE, a),
        outside,
    );
    r.register_fn(REVOKE.name, false, |a| check_id(&REVOKE, a), revoke);
    r.register_fn(TTL.name, true, |a| check_id(&TTL, a), outside);
    r.register_fn(LIST.name, true, |a| LIST.check(a), list);
    r.register_fn(PUT_TTL.name, false, |a| check_ttl_sig(&PUT_TTL, a), outside);
    r.register_fn(EXPIRE, false, check_expire, outside);
    r.register_fn(EXTEND, false, check_extend, outside);
    describe_all(
        r,
        &[
            (
                &GRANT,
                "int: the lease id",
                "Grant a lease of ttl seconds (strong level only).",
            ),
            (
                &KEEP_ALIVE,
                "int: the lease's ttl",
                "Renew a lease for its ttl from now (strong level only).",
            ),
            (
                &REVOKE,
                "int: keys deleted",
                "Revoke a lease, deleting every key attached to it.",
            ),
            (
                &TTL,
                "[ttl, remaining seconds, [key…]]",
                "A lease's granted ttl, the seconds left and its keys (at most 1,000).",
            ),
            (&LIST, "list: lease ids", "Every live lease's id."),
            (
                &PUT_TTL,
                "nil",
                "Write a key that is deleted ttl seconds from now (a lease of its own).",
            ),
        ],
    );
    // Lease records are a shard's own state; a sharded cluster refuses the
    // lease calls (docs/api.md).
    for name in [
        GRANT.name,
        KEEP_ALIVE.name,
        REVOKE.name,
        TTL.name,
        LIST.name,
    ] {
        r.route(name, Route::Unknown);
    }
    // Each shard's leader orders its own.
    r.route(EXPIRE, Route::Everywhere);
    r.route(EXTEND, Route::Everywhere);
}

fn check_ttl_sig(sig: &Sig, raw: &[u8]) -> Result<(), String> {
    match sig.parse(raw)?.last() {
        Some(Value::Int(ttl)) => ttl_arg(sig.name, *ttl).map(drop),
        _ => Err(format!("{} expects {}", sig.name, sig.signature())),
    }
}

fn check_id(sig: &Sig, raw: &[u8]) -> Result<(), String> {
    match sig.parse(raw)?.as_slice() {
        [Value::Int(id)] => lease_id(*id)
            .map(drop)
            .map_err(|e| format!("{}: {e}", sig.name)),
        _ => Err(format!("{} expects {}", sig.name, sig.signature())),
    }
}

/// `kv.put`'s `check_args`: `(key, value)`, or `(key, value, lease)`.
pub(super) fn check_put_lease(raw: &[u8]) -> Result<(), String> {
    match PUT_LEASE.parse(raw)?.as_slice() {
        [_, _, Value::Int(id)] => lease_id(*id).map(drop).map_err(|e| format!("kv.put: {e}")),
        _ => Err(PUT_LEASE.mismatch().0),
    }
}

fn outside(_: &mut Txn<'_>, _: &Bytes) -> Outcome {
    Err(Abort::new("the lease calls run only through execute_call"))
}

/// Whether `name` is one of the calls [`run`] runs.
fn is_lease_call(name: &str) -> bool {
    name.starts_with("lease.") || name.starts_with("creek.lease.") || name == PUT_TTL.name
}

/// The abort of a strong-only lease call in a weak op.
pub(crate) fn level_violation(call: &ProcCall) -> Option<Abort> {
    if call.strong || !is_lease_call(&call.name) {
        return None;
    }
    let name = STRONG_ONLY.iter().find(|n| **n == &*call.name)?;
    Some(Abort::new(format!(
        "{name} decides a lease's id or deadline in the committed order: invoke it at the \
         strong level"
    )))
}

/// Run `call` if it is a lease call that needs its op's time (`None`
/// otherwise).
pub(crate) fn run(txn: &mut Txn<'_>, call: &ProcCall, planted: PlantedBugs) -> Option<Outcome> {
    if !is_lease_call(&call.name) {
        return None;
    }
    let now = call.time_us;
    let raw = &call.args;
    let int = |sig: &Sig| -> Result<i64, Abort> {
        match sig.args(raw)?.as_slice() {
            [.., Value::Int(v)] => Ok(*v),
            _ => Err(sig.mismatch()),
        }
    };
    Some(match &*call.name {
        n if n == GRANT.name => int(&GRANT).and_then(|ttl| {
            let ttl = ttl_arg(GRANT.name, ttl).map_err(Abort)?;
            grant(txn, ttl, now).map(|id| Value::Int(id as i64).encode())
        }),
        n if n == KEEP_ALIVE.name => int(&KEEP_ALIVE).and_then(|id| {
            let id = lease_id(id).map_err(Abort)?;
            let mut record = live(txn, id, now)?;
            record.deadline_us = record.deadline_us.max(now.saturating_add(record.ttl_us()));
            txn.put(record_key(id), record.encode());
            Ok(Value::Int(record.ttl_s as i64).encode())
        }),
        n if n == TTL.name => int(&TTL).and_then(|id| ttl(txn, id, now)),
        n if n == PUT_TTL.name => put_ttl(txn, raw, now),
        EXPIRE if planted.has(Bug::LeaseEarlyExpiry) => expire(txn, raw, u64::MAX),
        EXPIRE => expire(txn, raw, now),
        EXTEND => extend(txn, raw, now),
        // revoke and list need no time: their bodies run as registered.
        _ => return None,
    })
}

/// Grant a lease of `ttl_s` from `now_us`: its id.
fn grant(txn: &mut Txn<'_>, ttl_s: u64, now_us: u64) -> Result<u64, Abort> {
    let live_count = read_u64(txn, LIVE_KEY);
    if live_count >= LEASES_MAX {
        return Err(Abort::new(format!(
            "lease.grant: {live_count} leases are live, the most a group holds; revoke some first"
        )));
    }
    let id = read_u64(txn, NEXT_KEY) + 1;
    write_u64(txn, NEXT_KEY, id);
    write_u64(txn, LIVE_KEY, live_count + 1);
    let record = Record {
        ttl_s,
        deadline_us: now_us.saturating_add(ttl_s.saturating_mul(1_000_000)),
    };
    txn.put(record_key(id), record.encode());
    Ok(id)
}

/// `lease.ttl(id)` → `[ttl, remaining seconds, [key…]]`.
fn ttl(txn: &mut Txn<'_>, id: i64, now_us: u64) -> Outcome {
    let id = lease_id(id).map_err(Abort)?;
    let record = live(txn, id, now_us)?;
    let remaining_s = (record.deadline_us - now_us).div_ceil(1_000_000);
    let prefix = keys_prefix(id);
    let keys = txn
        .scan(&prefix, &prefix_end(&prefix), TTL_KEYS_MAX)
        .into_iter()
        .map(|(k, _)| Value::Bytes(k.slice(prefix.len()..)))
        .collect();
    Ok(Value::List(vec![
        Value::Int(record.ttl_s as i64),
        Value::Int(remaining_s as i64),
        Value::List(keys),
    ])
    .encode())
}

/// `lease.list()` → the ids of the leases with a record.
fn list(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    LIST.args(raw)?;
    let ids = txn
        .scan(
            RECORD_PREFIX,
            &prefix_end(RECORD_PREFIX),
            LEASES_MAX as usize,
        )
        .into_iter()
        .filter(|(_, v)| Record::decode(v).is_some_and(|r| r.deadline_us > 0))
        .filter_map(|(k, _)| parse_record_key(&k))
        .map(|id| Value::Int(id as i64))
        .collect();
    Ok(Value::List(ids).encode())
}

/// `lease.revoke(id)` → the keys deleted.
fn revoke(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let id = match REVOKE.args(raw)?.as_slice() {
        [Value::Int(id)] => lease_id(*id).map_err(Abort)?,
        _ => return Err(REVOKE.mismatch()),
    };
    let record = txn
        .get(&record_key(id))
        .and_then(|v| Record::decode(&v))
        .filter(|r| r.deadline_us > 0)
        .ok_or_else(|| not_found(id))?;
    Ok(Value::Int(delete_lease(txn, id, record) as i64).encode())
}

/// Delete up to [`KEYS_PER_OP`] of lease `id`'s keys, and its record once
/// none is left (marking it revoked otherwise): the keys deleted.
fn delete_lease(txn: &mut Txn<'_>, id: u64, record: Record) -> usize {
    let prefix = keys_prefix(id);
    let attached = txn.scan(&prefix, &prefix_end(&prefix), KEYS_PER_OP + 1);
    let more = attached.len() > KEYS_PER_OP;
    let mut deleted = 0;
    for (index, _) in attached.into_iter().take(KEYS_PER_OP) {
        let key = index.slice(prefix.len()..);
        txn.delete(index);
        txn.delete(of_key(&key));
        if txn.get(&key).is_some() {
            txn.delete(key);
            deleted += 1;
        }
    }
    if more {
        let revoked = Record {
            deadline_us: 0,
            ..record
        };
        txn.put(record_key(id), revoked.encode());
    } else {
        txn.delete(record_key(id));
        let live_count = read_u64(txn, LIVE_KEY);
        write_u64(txn, LIVE_KEY, live_count.saturating_sub(1));
    }
    deleted
}

/// Attach `key` (being written) to lease `id`, which must be live at
/// `now_us`; detaches it from any other lease first.
fn attach(txn: &mut Txn<'_>, key: &Bytes, id: u64) -> Result<(), Abort> {
    // A lease whose deadline passed but whose expiry op is not ordered yet
    // still takes keys: the expiry deletes them with it (as in etcd).
    txn.get(&record_key(id))
        .and_then(|v| Record::decode(&v))
        .filter(|r| r.deadline_us > 0)
        .ok_or_else(|| not_found(id))?;
    let of = of_key(key);
    match txn.get(&of) {
        Some(old) if old.as_ref() == id.to_be_bytes() => return Ok(()),
        Some(old) => {
            if let Ok(old) = <[u8; 8]>::try_from(old.as_ref()) {
                txn.delete(index_key(u64::from_be_bytes(old), key));
            }
        }
        None => {}
    }
    txn.put(of, Bytes::copy_from_slice(&id.to_be_bytes()));
    txn.put(index_key(id, key), Bytes::from_static(b"\x01"));
    Ok(())
}

/// Detach `key` from its lease, if it has one: a write without a lease or
/// a delete of `key` does this.
pub(super) fn detach(txn: &mut Txn<'_>, key: &[u8]) {
    let of = of_key(key);
    if let Some(old) = txn.get(&of) {
        if let Ok(old) = <[u8; 8]>::try_from(old.as_ref()) {
            txn.delete(index_key(u64::from_be_bytes(old), key));
        }
        txn.delete(of);
    }
}

/// The lease `key` is attached to (0: none).
pub(super) fn lease_of(txn: &mut Txn<'_>, key: &[u8]) -> i64 {
    txn.get(&of_key(key))
        .and_then(|id| <[u8; 8]>::try_from(id.as_ref()).ok())
        .map_or(0, |id| {
            i64::try_from(u64::from_be_bytes(id)).unwrap_or(i64::MAX)
        })
}

/// Write `key` (detached from any lease): what every plain put does.
pub(super) fn put_plain(txn: &mut Txn<'_>, key: &Bytes, value: &Bytes) {
    detach(txn, key);
    txn.put(key.clone(), value.clone());
}

/// `kv.put(key, value, lease)`: write `key` attached to `lease`.
pub(super) fn put_with_lease(txn: &mut Txn<'_>, key: &Bytes, value: &Bytes, lease: i64) -> Outcome {
    let id = lease_id(lease).map_err(|e| Abort::new(format!("kv.put: {e}")))?;
    attach(txn, key, id)?;
    txn.put(key.clone(), value.clone());
    Ok(Value::Nil.encode())
}

/// `kv.put_ttl(key, value, ttl)`: grant a lease of `ttl` for this key alone
/// and write the key attached to it.
fn put_ttl(txn: &mut Txn<'_>, raw: &Bytes, now_us: u64) -> Outcome {
    let args = PUT_TTL.args(raw)?;
    let [Value::Bytes(key), Value::Bytes(value), Value::Int(ttl)] = args.as_slice() else {
        return Err(PUT_TTL.mismatch());
    };
    let ttl = ttl_arg(PUT_TTL.name, *ttl).map_err(Abort)?;
    let id = grant(txn, ttl, now_us)?;
    attach(txn, key, id)?;
    txn.put(key.clone(), value.clone());
    Ok(Value::Nil.encode())
}

/// The call that expires leases `ids` (each checked again when it runs).
pub fn expire_call(ids: &[u64]) -> ProcCall {
    let ids = ids
        .iter()
        .take(EXPIRE_BATCH_MAX)
        .map(|id| Value::Int(*id as i64))
        .collect();
    ProcCall::new(EXPIRE, encode_args(&[Value::List(ids)]))
}

/// The call that extends every live lease by its TTL from its op's time.
pub fn extend_call() -> ProcCall {
    ProcCall::new(EXTEND, encode_args(&[]))
}

fn expire_ids(raw: &[u8]) -> Result<Vec<u64>, String> {
    let bad = || {
        format!(
            "{EXPIRE}: malformed arguments: expected (ids: a list of at most \
             {EXPIRE_BATCH_MAX} lease ids)"
        )
    };
    let args = creek_types::value::decode_args(raw).map_err(|_| bad())?;
    let [Value::List(ids)] = args.as_slice() else {
        return Err(bad());
    };
    if ids.len() > EXPIRE_BATCH_MAX {
        return Err(bad());
    }
    ids.iter()
        .map(|v| match v {
            Value::Int(id) => lease_id(*id),
            _ => Err(bad()),
        })
        .collect()
}

fn check_expire(raw: &[u8]) -> Result<(), String> {
    expire_ids(raw).map(drop)
}

fn check_extend(raw: &[u8]) -> Result<(), String> {
    match creek_types::value::decode_args(raw) {
        Ok(args) if args.is_empty() => Ok(()),
        _ => Err(format!("{EXTEND}: malformed arguments: it takes none")),
    }
}

/// [`EXPIRE`]: delete each named lease that is due at this op's time: the
/// keys deleted.
fn expire(txn: &mut Txn<'_>, raw: &Bytes, now_us: u64) -> Outcome {
    let ids = expire_ids(raw).map_err(Abort)?;
    let mut deleted = 0;
    for id in ids {
        let record = txn.get(&record_key(id)).and_then(|v| Record::decode(&v));
        if let Some(record) = record.filter(|r| r.due(now_us)) {
            deleted += delete_lease(txn, id, record);
        }
    }
    Ok(Value::Int(deleted as i64).encode())
}

/// [`EXTEND`]: every live lease's deadline becomes at least this op's time
/// plus its TTL: the leases extended.
fn extend(txn: &mut Txn<'_>, raw: &Bytes, now_us: u64) -> Outcome {
    check_extend(raw).map_err(Abort)?;
    let records = txn.scan(
        RECORD_PREFIX,
        &prefix_end(RECORD_PREFIX),
        LEASES_MAX as usize,
    );
    let mut extended = 0i64;
    for (k, v) in records {
        let Some(mut record) = Record::decode(&v).filter(|r| r.deadline_us > 0) else {
            continue;
        };
        let at_least = now_us.saturating_add(record.ttl_us());
        if record.deadline_us < at_least {
            record.deadline_us = at_least;
            txn.put(k, record.encode());
            extended += 1;
        }
    }
    Ok(Value::Int(extended).encode())
}

#[cfg(test)]
mod tests;
