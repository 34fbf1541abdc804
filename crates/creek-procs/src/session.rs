//! Client sessions: the replicated table that makes a client's retries take
//! effect once, and how it stays bounded.
//!
//! A write carrying a [`ClientRequestId`] leaves an *entry* under
//! `\0dedup/<client><seq>`: the time of the op that first ran it and its
//! outcome. A later op with the same id finds the entry and returns the
//! recorded outcome without running again. Entries leave the table two ways,
//! both as writes of ops in the order, so every replica drops the same ones
//! at the same place:
//!
//! - **Acknowledgement.** A client lists, on a later request, the sequence
//!   numbers it has its answer for and never sent twice; that request's op
//!   deletes their entries ([`ProcCall::acked`]). A request sent once has no
//!   copy left to deduplicate, so this is safe and keeps the table at about
//!   the client's requests in flight.
//! - **Expiry.** The leader periodically orders an [`EXPIRE`] op that
//!   deletes the listed entries written before a cutoff, remembers per
//!   client the highest seq it deleted (`\0sessions/client/<client>`), and
//!   moves the *horizon* (`\0sessions/horizon`, a time in the order). A
//!   request whose entry is not found is refused with an abort starting
//!   [`SESSION_EXPIRED`] when its seq is at or below its client's expired
//!   seq (a retry of a forgotten request), or when its op's own time is
//!   below the horizon (a copy that waited, a partition say, longer than the
//!   retention): a copy of it may have run and been forgotten, so running it
//!   could apply it twice. A client's record is itself deleted once it is
//!   older than the cutoff.
//!
//! Times are the ops' hybrid-logical-clock physical parts (µs), fixed when
//! the op is created, so an op's verdict depends only on the state it reads.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::registry::{Registry, INTERNAL_KEY_PREFIX};
use creek_exec::txn::{Abort, Outcome, Txn, Write};
use creek_types::value::{decode_args, encode_args, Value};
use creek_types::{ClientRequestId, ProcCall};

/// The procedure that expires sessions. Internal: the leader invokes it,
/// clients cannot (names starting `creek.` are refused at the client API).
pub const EXPIRE: &str = "creek.sessions.expire";

/// Prefix of procedure names only replicas invoke.
pub const INTERNAL_PROC_PREFIX: &str = "creek.";

/// How an expired request's abort message starts.
pub const SESSION_EXPIRED: &str = "session expired";

/// Entries an [`EXPIRE`] op lists at most (16 bytes each in its arguments).
pub const EXPIRE_BATCH_MAX: usize = 4096;

/// Acknowledged sequence numbers one request carries at most.
pub const ACKED_MAX: usize = 256;

/// The byte every session key starts with (the internal key prefix).
pub const SESSION_PREFIX: &[u8] = &[INTERNAL_KEY_PREFIX];
/// Prefix of the entry keys.
pub const ENTRY_PREFIX: &[u8] = b"\0dedup/";
const HORIZON_KEY: &[u8] = b"\0sessions/horizon";
/// Prefix of the per-client records: the highest seq expired, and when.
pub const CLIENT_PREFIX: &[u8] = b"\0sessions/client/";
/// Entry format tag: time, then the outcome. Entries written before expiry
/// existed start with the outcome tag (0 or 1) and count as time 0.
const ENTRY_TIMED: u8 = 2;

/// The key of `id`'s entry.
pub fn entry_key(id: ClientRequestId) -> Bytes {
    let mut k = BytesMut::with_capacity(ENTRY_PREFIX.len() + 16);
    k.put_slice(ENTRY_PREFIX);
    k.put_u64(id.client);
    k.put_u64(id.seq);
    k.freeze()
}

/// The request id an entry key names, if `key` is one.
pub fn parse_entry_key(key: &[u8]) -> Option<ClientRequestId> {
    let mut rest = key.strip_prefix(ENTRY_PREFIX)?;
    if rest.len() != 16 {
        return None;
    }
    Some(ClientRequestId {
        client: rest.get_u64(),
        seq: rest.get_u64(),
    })
}

/// An entry: when it was written and the outcome it recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The writing op's time (µs).
    pub time_us: u64,
    /// The recorded outcome.
    pub outcome: Outcome,
}

fn encode_entry(time_us: u64, outcome: &Outcome) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(ENTRY_TIMED);
    b.put_u64(time_us);
    match outcome {
        Ok(v) => {
            b.put_u8(0);
            b.put_slice(v);
        }
        Err(a) => {
            b.put_u8(1);
            b.put_slice(a.0.as_bytes());
        }
    }
    b.freeze()
}

/// Decode an entry's value.
pub fn decode_entry(b: &Bytes) -> Entry {
    let (time_us, body) = match b.first() {
        Some(&ENTRY_TIMED) if b.len() >= 10 => (
            u64::from_be_bytes(b[1..9].try_into().unwrap_or_default()),
            b.slice(9..),
        ),
        _ => (0, b.clone()),
    };
    let outcome = match body.first() {
        Some(0) => Ok(body.slice(1..)),
        Some(1) => Err(Abort(String::from_utf8_lossy(&body[1..]).into_owned())),
        _ => Err(Abort::new("corrupt deduplication record")),
    };
    Entry { time_us, outcome }
}

/// The key of `client`'s record.
pub fn client_key(client: u64) -> Bytes {
    let mut k = BytesMut::with_capacity(CLIENT_PREFIX.len() + 8);
    k.put_slice(CLIENT_PREFIX);
    k.put_u64(client);
    k.freeze()
}

/// The client a record key names, if `key` is one.
pub fn parse_client_key(key: &[u8]) -> Option<u64> {
    let rest: [u8; 8] = key.strip_prefix(CLIENT_PREFIX)?.try_into().ok()?;
    Some(u64::from_be_bytes(rest))
}

/// A client's record: the highest seq whose entry expired, and the time of
/// the expiry op that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientRecord {
    /// Requests of this client up to this seq are refused unless found.
    pub expired_through: u64,
    /// When the record was written (µs).
    pub time_us: u64,
}

/// Decode a client record (`None` if malformed).
pub fn decode_client(b: &[u8]) -> Option<ClientRecord> {
    let b: [u8; 16] = b.try_into().ok()?;
    let (through, time) = b.split_at(8);
    Some(ClientRecord {
        expired_through: u64::from_be_bytes(through.try_into().ok()?),
        time_us: u64::from_be_bytes(time.try_into().ok()?),
    })
}

fn encode_client(r: ClientRecord) -> Bytes {
    let mut b = BytesMut::with_capacity(16);
    b.put_u64(r.expired_through);
    b.put_u64(r.time_us);
    b.freeze()
}

fn read_horizon(txn: &mut Txn<'_>) -> u64 {
    txn.get(HORIZON_KEY)
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map_or(0, u64::from_be_bytes)
}

/// What deduplication decided before the procedure runs.
pub(crate) enum Before {
    /// Run the procedure, then [`after`].
    Run,
    /// Answer this without running: a recorded outcome, or the expiry abort.
    Answer(Outcome),
}

/// Look `id` up: a recorded outcome, a refusal (its client's requests up to
/// it expired, or its time is past the horizon), or run.
pub(crate) fn before(txn: &mut Txn<'_>, id: ClientRequestId, time_us: u64) -> Before {
    if let Some(record) = txn.get(&entry_key(id)) {
        return Before::Answer(decode_entry(&record).outcome);
    }
    let expired = |why: String| {
        Before::Answer(Err(Abort::new(format!(
            "{SESSION_EXPIRED}: request {} of client {:016x} was not applied: {why}; a copy \
             of it may have been applied and forgotten, so read before sending it again \
             as a new request",
            id.seq, id.client
        ))))
    };
    if let Some(r) = txn
        .get(&client_key(id.client))
        .and_then(|v| decode_client(&v))
    {
        if id.seq <= r.expired_through {
            return expired(format!(
                "its client's requests up to {} are past the session retention",
                r.expired_through
            ));
        }
    }
    let horizon = read_horizon(txn);
    if time_us < horizon {
        return expired(format!(
            "it reached the order after the session retention (its time {time_us} µs is \
             before the horizon {horizon} µs)"
        ));
    }
    Before::Run
}

/// The session writes of an op that ran: its entry and the deletion of the
/// entries it acknowledges, merged into the sorted `writes`.
pub(crate) fn after(
    call: &ProcCall,
    id: ClientRequestId,
    outcome: &Outcome,
    writes: &mut Vec<Write>,
) {
    let mut extra: Vec<Write> = Vec::with_capacity(1 + call.acked.len());
    extra.push((entry_key(id), Some(encode_entry(call.time_us, outcome))));
    for &seq in call.acked.iter().take(ACKED_MAX) {
        if seq != id.seq {
            extra.push((
                entry_key(ClientRequestId {
                    client: id.client,
                    seq,
                }),
                None,
            ));
        }
    }
    extra.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    extra.dedup_by(|a, b| a.0 == b.0);
    for w in extra {
        match writes.binary_search_by(|(k, _)| k.cmp(&w.0)) {
            // A procedure cannot write internal keys; keep its write if so.
            Ok(_) => {}
            Err(pos) => writes.insert(pos, w),
        }
    }
}

/// The arguments of an [`EXPIRE`] op: move the horizon to `horizon_us` (it
/// never moves back), delete the listed entries written before
/// `delete_before_us` (recording per client the highest seq deleted), and
/// delete the listed clients' records written before it.
pub fn expire_call(
    horizon_us: u64,
    delete_before_us: u64,
    ids: &[ClientRequestId],
    clients: &[u64],
) -> ProcCall {
    let mut list = BytesMut::with_capacity(ids.len() * 16);
    for id in ids.iter().take(EXPIRE_BATCH_MAX) {
        list.put_u64(id.client);
        list.put_u64(id.seq);
    }
    let mut cl = BytesMut::with_capacity(clients.len() * 8);
    for c in clients.iter().take(EXPIRE_BATCH_MAX) {
        cl.put_u64(*c);
    }
    let args = encode_args(&[
        Value::Int(clamp_i64(horizon_us)),
        Value::Int(clamp_i64(delete_before_us)),
        Value::Bytes(list.freeze()),
        Value::Bytes(cl.freeze()),
    ]);
    ProcCall::new(EXPIRE, args)
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

struct ExpireArgs {
    horizon: u64,
    delete_before: u64,
    ids: Bytes,
    clients: Bytes,
}

fn expire_args(args: &[u8]) -> Result<ExpireArgs, String> {
    let v = decode_args(args).map_err(|e| format!("malformed arguments: {e}"))?;
    match v.as_slice() {
        [Value::Int(h), Value::Int(d), Value::Bytes(ids), Value::Bytes(clients)]
            if *h >= 0 && *d >= 0 && d <= h && ids.len() % 16 == 0 && clients.len() % 8 == 0 =>
        {
            if ids.len() / 16 > EXPIRE_BATCH_MAX || clients.len() / 8 > EXPIRE_BATCH_MAX {
                return Err(format!(
                    "malformed arguments: more than {EXPIRE_BATCH_MAX} entries or clients"
                ));
            }
            Ok(ExpireArgs {
                horizon: *h as u64,
                delete_before: *d as u64,
                ids: ids.clone(),
                clients: clients.clone(),
            })
        }
        _ => Err(
            "malformed arguments: expected (horizon: int ≥ 0, delete_before: int ≤ \
                  horizon, ids: bytes of 16-byte records, clients: bytes of 8-byte ids)"
                .into(),
        ),
    }
}

fn expire(txn: &mut Txn<'_>, args: &Bytes) -> Outcome {
    let a = expire_args(args).map_err(Abort)?;
    if a.horizon > read_horizon(txn) {
        txn.put(
            Bytes::from_static(HORIZON_KEY),
            Bytes::copy_from_slice(&a.horizon.to_be_bytes()),
        );
    }
    // The highest seq deleted per client, in client order.
    let mut through: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    let mut ids = a.ids;
    let mut deleted = 0i64;
    while ids.has_remaining() {
        let id = ClientRequestId {
            client: ids.get_u64(),
            seq: ids.get_u64(),
        };
        let key = entry_key(id);
        if let Some(v) = txn.get(&key) {
            if decode_entry(&v).time_us < a.delete_before {
                txn.delete(key);
                deleted += 1;
                let t = through.entry(id.client).or_default();
                *t = (*t).max(id.seq);
            }
        }
    }
    for (client, seq) in &through {
        let key = client_key(*client);
        let old = txn
            .get(&key)
            .and_then(|v| decode_client(&v))
            .map_or(0, |r| r.expired_through);
        // The expiry op's time, about: the leader sets the horizon one TTL
        // before it and the cutoff two.
        let record = ClientRecord {
            expired_through: old.max(*seq),
            time_us: a.horizon.saturating_add(a.horizon - a.delete_before),
        };
        txn.put(key, encode_client(record));
    }
    let mut clients = a.clients;
    while clients.has_remaining() {
        let client = clients.get_u64();
        if through.contains_key(&client) {
            continue;
        }
        let key = client_key(client);
        if let Some(r) = txn.get(&key).and_then(|v| decode_client(&v)) {
            if r.time_us < a.delete_before {
                txn.delete(key);
            }
        }
    }
    Ok(Value::Int(deleted).encode())
}

/// Register [`EXPIRE`].
pub(crate) fn register(r: &mut Registry) {
    r.register_fn(EXPIRE, false, |a| expire_args(a).map(|_| ()), expire);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::testkit::Harness;

    fn incr(client: u64, seq: u64, time_us: u64, acked: &[u64]) -> ProcCall {
        let mut call = ProcCall::new(
            "kv.incr",
            encode_args(&[Value::Bytes(Bytes::from_static(b"c")), Value::Int(1)]),
        );
        call.request_id = Some(ClientRequestId { client, seq });
        call.acked = acked.to_vec();
        call.time_us = time_us;
        call
    }

    fn entries(h: &Harness) -> Vec<ClientRequestId> {
        h.keys().iter().filter_map(|k| parse_entry_key(k)).collect()
    }

    fn id(client: u64, seq: u64) -> ClientRequestId {
        ClientRequestId { client, seq }
    }

    #[test]
    fn a_retry_is_answered_from_its_entry() {
        let mut h = Harness::new();
        let first = h.exec(&incr(1, 1, 100, &[]));
        assert_eq!(first.outcome, Ok(Value::Int(1).encode()));
        // A copy with another time (another replica's op) finds the entry.
        let again = h.exec(&incr(1, 1, 250, &[]));
        assert_eq!(again.outcome, first.outcome);
        assert!(again.writes.is_empty());
        let entry = decode_entry(&h.snap.0[&entry_key(id(1, 1))]);
        assert_eq!(entry.time_us, 100);
        assert_eq!(entry.outcome, first.outcome);
    }

    #[test]
    fn acknowledged_entries_are_deleted_by_the_next_write() {
        let mut h = Harness::new();
        for seq in 1..=3 {
            h.exec(&incr(1, seq, seq, &[]));
        }
        h.exec(&incr(2, 1, 1, &[]));
        // Its own seq in the list is ignored; another client's are not touched.
        h.exec(&incr(1, 4, 4, &[1, 3, 4, 9]));
        assert_eq!(entries(&h), vec![id(1, 2), id(1, 4), id(2, 1)]);
        // Acknowledgements on a read-only call write nothing.
        let mut get = ProcCall::new(
            "kv.get",
            encode_args(&[Value::Bytes(Bytes::from_static(b"c"))]),
        );
        get.request_id = Some(id(1, 5));
        get.acked = vec![2];
        assert!(h.exec(&get).writes.is_empty());
    }

    #[test]
    fn expiry_deletes_old_entries_and_refuses_late_copies() {
        let mut h = Harness::new();
        h.exec(&incr(1, 1, 1_000, &[]));
        h.exec(&incr(1, 2, 5_000, &[]));
        h.exec(&incr(2, 1, 1_000, &[]));
        let ex = h.exec(&expire_call(
            4_000,
            2_000,
            &[id(1, 1), id(1, 2), id(7, 7)],
            &[],
        ));
        assert_eq!(ex.outcome, Ok(Value::Int(1).encode()));
        assert_eq!(entries(&h), vec![id(1, 2), id(2, 1)]);
        let record = |h: &Harness, c| h.snap.0.get(&client_key(c)).and_then(|v| decode_client(v));
        assert_eq!(
            record(&h, 1),
            Some(ClientRecord {
                expired_through: 1,
                time_us: 6_000
            })
        );
        assert_eq!(record(&h, 2), None);
        assert_eq!(
            h.ok("kv.get", &[Value::Bytes(Bytes::from_static(b"c"))]),
            Value::Bytes(Bytes::from_static(b"3"))
        );
        // A retry of seq 1, even a fresh copy: refused, nothing written.
        for time in [1_500, 9_000] {
            let late = h.exec(&incr(1, 1, time, &[]));
            let refused = late.outcome.as_ref();
            assert!(refused.is_err_and(|a| a.0.starts_with(SESSION_EXPIRED)));
            assert!(late.writes.is_empty());
        }
        // Another client's late copy from before the horizon: refused too.
        assert!(h.exec(&incr(3, 1, 3_999, &[])).outcome.is_err());
        // A new request after the horizon runs; seq 2's copy is still answered.
        let ran = h.exec(&incr(1, 3, 4_000, &[])).outcome;
        assert_eq!(ran, Ok(Value::Int(4).encode()));
        let answered = h.exec(&incr(1, 2, 1_000, &[])).outcome;
        assert_eq!(answered, Ok(Value::Int(2).encode()));
        // The horizon never moves back; client records go once older than
        // the cutoff, not while the same op updates them.
        h.exec(&expire_call(10, 0, &[], &[1]));
        assert!(h.exec(&incr(1, 9, 3_999, &[])).outcome.is_err());
        assert!(record(&h, 1).is_some());
        h.exec(&expire_call(7_000, 6_001, &[], &[1, 2]));
        assert_eq!(record(&h, 1), None);
        // Without its record, an old retry is judged by the horizon only.
        assert!(h.exec(&incr(1, 1, 6_500, &[])).outcome.is_err());
    }

    #[test]
    fn expiry_arguments_are_checked() {
        let h = Harness::new();
        let bad = [
            encode_args(&[Value::Int(1), Value::Int(2), Value::Bytes(Bytes::new())]),
            encode_args(&[Value::Int(-1), Value::Int(-2), Value::Bytes(Bytes::new())]),
            encode_args(&[
                Value::Int(5),
                Value::Int(1),
                Value::Bytes(Bytes::from_static(b"x")),
            ]),
            encode_args(&[Value::Int(5)]),
        ];
        for args in bad {
            assert!(h
                .check_raw(EXPIRE, args)
                .is_err_and(|r| r.contains("malformed")));
        }
        let call = expire_call(5, 1, &[id(1, 2)], &[3]);
        assert_eq!(h.check_raw(EXPIRE, call.args), Ok(()));
    }

    #[test]
    fn entries_written_before_expiry_existed_still_answer() {
        let mut h = Harness::new();
        let key = entry_key(id(3, 1));
        h.snap
            .0
            .insert(key.clone(), Bytes::from_static(b"\x00\x02"));
        let e = decode_entry(&h.snap.0[&key]);
        assert_eq!(
            e,
            Entry {
                time_us: 0,
                outcome: Ok(Bytes::from_static(b"\x02"))
            }
        );
        assert_eq!(
            h.exec(&incr(3, 1, 9, &[])).outcome,
            Ok(Bytes::from_static(b"\x02"))
        );
    }
}
