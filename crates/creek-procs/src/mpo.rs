//! Operations across shards (MPOs, docs/cross-shard.md): the one call every
//! involved shard runs, [`RUN`], and what it carries.
//!
//! An MPO is a call whose declared keys live on several shards. Each
//! involved shard orders its own op for it in its own log, and every such
//! op's call is a [`MpoCall`]: the MPO's identity (the origin shard's op
//! id), which shard runs this copy (`me`), each involved shard's keys, and
//! the call itself. At its committed position each shard reads its own
//! keys and sends them to the others (the read exchange, driven by the
//! replica protocol); once it holds every other shard's values it runs the
//! call with them as [`Inputs`]: the call reads other shards' keys from
//! the inputs and its own from the state, and only its writes of its own
//! keys are installed. The call is deterministic and every shard holds the
//! same values, so every shard computes the same result.
//!
//! A retried request must take effect once on every shard, and each shard
//! keeps its own session table (which expires on its own schedule), so a
//! shard's reads also carry its **session verdict** on the request: run
//! it, or answer without running (an outcome recorded for it, or the
//! session-expiry refusal). Every shard sees every verdict and follows the
//! same one — the lowest shard's answer, if any shard has one — so a
//! request is applied on all of its shards or on none.
//!
//! A copy run without inputs (a tentative execution, before the exchange)
//! reads the other shards' keys as absent: its result is a guess that the
//! committed execution may correct.
//!
//! What a committed execution records in its shard's state, so the
//! replica protocol can find it again after a restart and answer a shard
//! that asks for its reads again: [`SEQ_KEY`], the index of the last MPO
//! the shard committed, and for each of its last [`READS_KEPT`] MPOs the
//! values it read ([`reads_key`]), how it ended ([`outcome_key`]) and
//! which MPO holds each index ([`order_key`], so the oldest record can be
//! found and deleted).
//!
//! A shard may hold two ops of one MPO (its own, and a copy another
//! shard handed it while its own was late): the first to commit runs the
//! call, the other commits as [`ANSWER`], which answers how the MPO ended
//! here — so an origin whose own op was the second still tells its client
//! the MPO's outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;

use crate::registry::{execute_call, Registry, INTERNAL_KEY_PREFIX};
use creek_exec::txn::{Abort, Executed, SnapshotRead, TxnLimits, VersionNo};
use creek_types::value::{decode_args_shared, encode_args, Value};
use creek_types::ProcCall;

/// The procedure every involved shard runs for an MPO. Internal: only
/// replicas invoke it.
pub const RUN: &str = "creek.mpo.run";

/// What a second op of an MPO on one shard runs: the outcome the first
/// recorded ([`outcome_key`]). Internal: only replicas invoke it.
pub const ANSWER: &str = "creek.mpo.answer";

/// A shard's final timestamp for an MPO when MPOs are ordered by a
/// genuine atomic multicast among their shards (Skeen's protocol over
/// groups; [`stamp_call`]): it changes nothing when it runs, and the
/// replicas read it where their log decides it. Internal: only replicas
/// invoke it.
pub const STAMP: &str = "creek.mpo.stamp";

/// In the message of an MPO's call that touched a key it did not declare.
pub const UNDECLARED: &str = "is not among the keys it declared";

/// Most shards one MPO involves.
pub const PARTS_MAX: usize = 64;

/// Most keys one MPO names, over all its shards.
pub const KEYS_MAX: usize = 4096;

/// Where a shard keeps the index of the last MPO it committed (an 8-byte
/// big-endian integer; absent: none yet).
pub const SEQ_KEY: &[u8] = b"\0mpo/seq";

/// Where a shard keeps the values it read for an MPO (the MPO's id, 16
/// bytes, after the prefix).
pub const READS_PREFIX: &[u8] = b"\0mpo/reads/";

/// Where a shard keeps how an MPO ended, as [`encode_answer`] writes it
/// (the MPO's id, 16 bytes, after the prefix).
pub const OUTCOMES_PREFIX: &[u8] = b"\0mpo/outcome/";

/// Where a shard keeps which MPO holds each index (8 bytes after the
/// prefix).
pub const ORDER_PREFIX: &[u8] = b"\0mpo/order/";

/// How many MPOs' reads a shard keeps: those of index `k` are deleted when
/// index `k + READS_KEPT` commits.
pub const READS_KEPT: u64 = 1024;

/// An MPO's identity: the id `(origin replica, seq)` of the origin shard's
/// op for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MpoId {
    /// The replica the client called.
    pub origin: u64,
    /// Its seq there.
    pub seq: u64,
}

impl MpoId {
    /// The id an origin's call carries before the origin names it: the
    /// replica that invokes it fills in its own op's id.
    pub const UNSET: MpoId = MpoId { origin: 0, seq: 0 };
}

impl std::fmt::Display for MpoId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mpo {}:{}", self.origin, self.seq)
    }
}

/// One involved shard and the keys of the MPO it owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The shard.
    pub shard: u32,
    /// Its keys, strictly ascending: the call may read and write them, and
    /// the shard sends their values to the others.
    pub keys: Vec<Bytes>,
    /// Its write-only prefixes, strictly ascending: the call may write any
    /// key starting with one (rows it creates under ids it computes as it
    /// runs, such as a new order's), but reads none it does not also name
    /// in `keys`, so no shard needs their values. Usually empty.
    pub prefixes: Vec<Bytes>,
}

impl Part {
    /// Shard `shard` with `keys` and no prefix.
    pub fn new(shard: u32, keys: Vec<Bytes>) -> Part {
        Part {
            shard,
            keys,
            prefixes: Vec::new(),
        }
    }

    /// Whether `key` starts with one of the part's prefixes.
    pub fn covers(&self, key: &[u8]) -> bool {
        self.prefixes.iter().any(|p| key.starts_with(p))
    }
}

/// What a committed execution runs with: the MPO's index in this shard's
/// sequence, and the values the other involved shards read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inputs {
    /// The MPO's index among this shard's MPOs (1, 2, …).
    pub index: u64,
    /// Every other involved shard's keys with their values, ascending.
    pub remote: Reads,
    /// Every other involved shard's session verdict, by shard ascending
    /// (`None`: run; else the encoded answer).
    pub verdicts: Vec<(u32, Option<Bytes>)>,
    /// This shard's commit-time proposal, recorded with its reads (0:
    /// none).
    pub time: u64,
}

/// The call one involved shard runs for an MPO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpoCall {
    /// The MPO.
    pub id: MpoId,
    /// The shard running this copy.
    pub me: u32,
    /// Every involved shard, ascending, `me` among them.
    pub parts: Vec<Part>,
    /// The procedure the client called.
    pub name: Arc<str>,
    /// Its arguments.
    pub args: Bytes,
    /// Given at the committed position; `None` in tentative executions.
    pub inputs: Option<Inputs>,
}

impl MpoCall {
    /// An MPO of `name(args)` with the given parts (sorted here), run by
    /// shard `me`. Checked like a decoded one.
    pub fn new(
        id: MpoId,
        me: u32,
        mut parts: Vec<Part>,
        name: &str,
        args: Bytes,
    ) -> Result<Self, String> {
        parts.sort_by_key(|p| p.shard);
        for p in &mut parts {
            p.keys.sort();
            p.keys.dedup();
            p.prefixes.sort();
            p.prefixes.dedup();
        }
        let call = MpoCall {
            id,
            me,
            parts,
            name: Arc::from(name),
            args,
            inputs: None,
        };
        call.validate()?;
        Ok(call)
    }

    /// The same MPO, run by shard `me`.
    pub fn for_shard(&self, me: u32) -> Result<Self, String> {
        let call = MpoCall {
            me,
            inputs: None,
            ..self.clone()
        };
        call.validate()?;
        Ok(call)
    }

    /// `call` (a [`RUN`] call) with the MPO named `id` if it carried
    /// [`MpoId::UNSET`]; any other call unchanged.
    pub fn name_origin(call: ProcCall, id: MpoId) -> ProcCall {
        if call.name.as_ref() != RUN {
            return call;
        }
        match MpoCall::decode(&call.args) {
            Ok(mpo) if mpo.id == MpoId::UNSET => ProcCall {
                args: MpoCall { id, ..mpo }.encode(),
                ..call
            },
            _ => call,
        }
    }

    /// The same call with its committed inputs.
    pub fn with_inputs(&self, inputs: Inputs) -> Self {
        MpoCall {
            inputs: Some(inputs),
            ..self.clone()
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.parts.len() < 2 || self.parts.len() > PARTS_MAX {
            return Err(format!(
                "{RUN}: an operation across shards involves 2 to {PARTS_MAX} shards, not {}",
                self.parts.len()
            ));
        }
        if self.parts.windows(2).any(|w| w[0].shard >= w[1].shard) {
            return Err(format!("{RUN}: shards must be distinct and ascending"));
        }
        if !self.parts.iter().any(|p| p.shard == self.me) {
            return Err(format!("{RUN}: shard {} is not involved", self.me));
        }
        let mut all = BTreeSet::new();
        for p in &self.parts {
            if p.keys.is_empty() && p.prefixes.is_empty() {
                return Err(format!("{RUN}: shard {} has no key", p.shard));
            }
            if p.keys.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("{RUN}: keys must be distinct and ascending"));
            }
            for k in &p.keys {
                if is_internal(k) {
                    return Err(format!("{RUN}: keys starting with 0x00 are reserved"));
                }
                if !all.insert(k) {
                    return Err(format!(
                        "{RUN}: key {} is given to two shards",
                        Value::Bytes(k.clone())
                    ));
                }
            }
        }
        let mut prefixes = 0;
        for p in &self.parts {
            if p.prefixes.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("{RUN}: prefixes must be distinct and ascending"));
            }
            for prefix in &p.prefixes {
                prefixes += 1;
                if prefix.is_empty() || is_internal(prefix) {
                    return Err(format!(
                        "{RUN}: a prefix must not be empty or start with 0x00"
                    ));
                }
                for q in &self.parts {
                    let nested = q.prefixes.iter().any(|other| {
                        other != prefix && (other.starts_with(prefix) || prefix.starts_with(other))
                    });
                    let claimed =
                        q.shard != p.shard && q.keys.iter().any(|k| k.starts_with(prefix));
                    if nested || (q.shard != p.shard && q.prefixes.contains(prefix)) || claimed {
                        return Err(format!(
                            "{RUN}: prefix {} overlaps another shard's keys or prefixes",
                            Value::Bytes(prefix.clone())
                        ));
                    }
                }
            }
        }
        if all.len() + prefixes > KEYS_MAX {
            return Err(format!("{RUN}: more than {KEYS_MAX} keys and prefixes"));
        }
        if self.name.is_empty() || self.name.as_ref() == RUN {
            return Err(format!("{RUN}: no procedure to run"));
        }
        Ok(())
    }

    /// The keys shard `me` owns.
    pub fn local_keys(&self) -> &[Bytes] {
        self.parts
            .iter()
            .find(|p| p.shard == self.me)
            .map_or(&[], |p| &p.keys)
    }

    /// The other involved shards.
    pub fn others(&self) -> impl Iterator<Item = u32> + '_ {
        self.parts
            .iter()
            .map(|p| p.shard)
            .filter(move |s| *s != self.me)
    }

    /// The keys shard `shard` owns (empty if it is not involved).
    pub fn keys_of(&self, shard: u32) -> &[Bytes] {
        self.parts
            .iter()
            .find(|p| p.shard == shard)
            .map_or(&[], |p| &p.keys)
    }

    /// Whether `reads` are what shard `shard` sends: its verdict, its
    /// commit-time proposal if any, then exactly its keys, each once, in
    /// order.
    pub fn reads_fit(&self, shard: u32, reads: &Reads) -> bool {
        let keys = self.keys_of(shard);
        let has_verdict = reads
            .first()
            .is_some_and(|(k, _)| k.as_ref() == VERDICT_KEY);
        let (_, _, rest) = split_reads(reads);
        has_verdict && keys.len() == rest.len() && keys.iter().zip(rest).all(|(k, (r, _))| k == r)
    }

    /// What shard `me` sends the others, read from `snapshot` (its state
    /// at the MPO's position): its session verdict on `client`'s request,
    /// then its keys' values.
    pub fn read_local(&self, client: &ProcCall, snapshot: &dyn SnapshotRead) -> Reads {
        let (verdict, _) = verdict_of(self, client, snapshot);
        let mut reads = vec![(
            Bytes::from_static(VERDICT_KEY),
            verdict.as_ref().map(encode_answer),
        )];
        reads.extend(
            self.local_keys()
                .iter()
                .map(|k| (k.clone(), snapshot.read(k).0)),
        );
        reads
    }

    /// The call `client` (its request id, user, time and level kept) as run
    /// by this shard: [`RUN`] with this MPO as arguments.
    pub fn call(&self, client: &ProcCall) -> ProcCall {
        ProcCall {
            name: Arc::from(RUN),
            args: self.encode(),
            ..client.clone()
        }
    }

    /// The arguments of its [`RUN`] call.
    pub fn encode(&self) -> Bytes {
        let parts = self
            .parts
            .iter()
            .map(|p| {
                let mut part = vec![
                    Value::Int(i64::from(p.shard)),
                    Value::List(p.keys.iter().cloned().map(Value::Bytes).collect()),
                ];
                if !p.prefixes.is_empty() {
                    part.push(Value::List(
                        p.prefixes.iter().cloned().map(Value::Bytes).collect(),
                    ));
                }
                Value::List(part)
            })
            .collect();
        let inputs = match &self.inputs {
            None => Value::Nil,
            Some(i) => Value::List(vec![
                Value::Int(int(i.index)),
                reads_value(&i.remote),
                Value::Int(int(i.time)),
                Value::List(
                    i.verdicts
                        .iter()
                        .map(|(s, v)| {
                            Value::List(vec![
                                Value::Int(i64::from(*s)),
                                v.clone().map_or(Value::Nil, Value::Bytes),
                            ])
                        })
                        .collect(),
                ),
            ]),
        };
        encode_args(&[
            Value::Int(int(self.id.origin)),
            Value::Int(int(self.id.seq)),
            Value::Int(i64::from(self.me)),
            Value::List(parts),
            Value::Bytes(Bytes::copy_from_slice(self.name.as_bytes())),
            Value::Bytes(self.args.clone()),
            inputs,
        ])
    }

    /// The MPO a [`RUN`] call's arguments carry; an error says what is
    /// wrong with them. Total: any bytes give one or the other.
    pub fn decode(raw: &Bytes) -> Result<Self, String> {
        let bad = |what: &str| format!("{RUN}: malformed arguments: {what}");
        let args = decode_args_shared(raw).map_err(|e| bad(&e.to_string()))?;
        let [Value::Int(origin), Value::Int(seq), Value::Int(me), Value::List(parts), Value::Bytes(name), Value::Bytes(args), inputs] =
            args.as_slice()
        else {
            return Err(bad("expected (origin, seq, me, parts, name, args, inputs)"));
        };
        let byte_list = |items: &[Value], what: &str| {
            items
                .iter()
                .map(|k| k.as_bytes().cloned().ok_or_else(|| bad(what)))
                .collect::<Result<Vec<_>, _>>()
        };
        let parts = parts
            .iter()
            .map(|p| {
                let (shard, keys, prefixes) = match p.as_list() {
                    Some([Value::Int(shard), Value::List(keys)]) => (shard, keys, &[][..]),
                    Some([Value::Int(shard), Value::List(keys), Value::List(prefixes)]) => {
                        (shard, keys, prefixes.as_slice())
                    }
                    _ => return Err(bad("part")),
                };
                Ok(Part {
                    shard: u32::try_from(*shard).map_err(|_| bad("shard"))?,
                    keys: byte_list(keys, "key")?,
                    prefixes: byte_list(prefixes, "prefix")?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let inputs = match inputs {
            Value::Nil => None,
            Value::List(items) => match items.as_slice() {
                [Value::Int(index), remote, Value::Int(time), Value::List(verdicts)] => {
                    Some(Inputs {
                        index: u64::try_from(*index).map_err(|_| bad("index"))?,
                        remote: reads_from_value(remote).ok_or_else(|| bad("remote reads"))?,
                        time: u64::try_from(*time).map_err(|_| bad("time"))?,
                        verdicts: verdicts
                            .iter()
                            .map(|v| match v.as_list() {
                                Some([Value::Int(s), Value::Nil]) => {
                                    Some((u32::try_from(*s).ok()?, None))
                                }
                                Some([Value::Int(s), Value::Bytes(b)]) => {
                                    Some((u32::try_from(*s).ok()?, Some(b.clone())))
                                }
                                _ => None,
                            })
                            .collect::<Option<_>>()
                            .ok_or_else(|| bad("verdicts"))?,
                    })
                }
                _ => return Err(bad("inputs")),
            },
            _ => return Err(bad("inputs")),
        };
        let call = MpoCall {
            id: MpoId {
                origin: u64::try_from(*origin).map_err(|_| bad("origin"))?,
                seq: u64::try_from(*seq).map_err(|_| bad("seq"))?,
            },
            me: u32::try_from(*me).map_err(|_| bad("me"))?,
            parts,
            name: Arc::from(std::str::from_utf8(name).map_err(|_| bad("name"))?),
            args: args.clone(),
            inputs,
        };
        call.validate()?;
        if let Some(inputs) = &call.inputs {
            let others: Vec<&Bytes> = call
                .parts
                .iter()
                .filter(|p| p.shard != call.me)
                .flat_map(|p| &p.keys)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if others.len() != inputs.remote.len()
                || others.iter().zip(&inputs.remote).any(|(k, (r, _))| *k != r)
            {
                return Err(bad("the remote reads are not the other shards' keys"));
            }
            let shards: Vec<u32> = call.others().collect();
            let given: Vec<u32> = inputs.verdicts.iter().map(|(s, _)| *s).collect();
            if shards != given {
                return Err(bad("the verdicts are not the other shards'"));
            }
        }
        Ok(call)
    }
}

/// A session verdict's answer as bytes: `[true, result]` or `[false,
/// abort message]`.
pub fn encode_answer(answer: &creek_exec::txn::Outcome) -> Bytes {
    match answer {
        Ok(result) => Value::List(vec![Value::Bool(true), Value::Bytes(result.clone())]),
        Err(abort) => Value::List(vec![
            Value::Bool(false),
            Value::Bytes(Bytes::copy_from_slice(abort.0.as_bytes())),
        ]),
    }
    .encode()
}

/// The answer [`encode_answer`] made; `None` for other bytes.
pub fn decode_answer(raw: &Bytes) -> Option<creek_exec::txn::Outcome> {
    match Value::decode_shared(raw).ok()? {
        Value::List(items) => match items.as_slice() {
            [Value::Bool(true), Value::Bytes(r)] => Some(Ok(r.clone())),
            [Value::Bool(false), Value::Bytes(m)] => {
                Some(Err(Abort(String::from_utf8_lossy(m).into_owned())))
            }
            _ => None,
        },
        _ => None,
    }
}

/// This shard's verdict on `client`'s request at `snapshot`: an answer
/// without running (a recorded outcome, the session-expiry refusal, or
/// `WRONG_SHARD` when the shard's map gives one of its keys of `mpo`
/// another shard, [`crate::ownership::refuse_part`]), or `None` to run
/// it; and the reads that decided it.
fn verdict_of(
    mpo: &MpoCall,
    client: &ProcCall,
    snapshot: &dyn SnapshotRead,
) -> (Option<creek_exec::txn::Outcome>, Vec<(Bytes, VersionNo)>) {
    let part = mpo.parts.iter().find(|p| p.shard == mpo.me);
    let refused =
        part.and_then(|p| crate::ownership::refuse_part(snapshot, &mpo.name, &p.keys, &p.prefixes));
    let Some(id) = client.request_id else {
        return (refused.map(Err), Vec::new());
    };
    let mut txn = creek_exec::txn::Txn::new(snapshot, TxnLimits::default(), true);
    let verdict = match crate::session::before(&mut txn, id, client.time_us) {
        crate::session::Before::Answer(outcome) => Some(outcome),
        crate::session::Before::Run => refused.map(Err),
    };
    (verdict, txn.finish(Ok(Bytes::new())).reads)
}

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Where a shard keeps the values it read for MPO `id`.
pub fn reads_key(id: MpoId) -> Bytes {
    let mut key = READS_PREFIX.to_vec();
    key.extend_from_slice(&id.origin.to_be_bytes());
    key.extend_from_slice(&id.seq.to_be_bytes());
    Bytes::from(key)
}

/// Where a shard keeps how MPO `id` ended.
pub fn outcome_key(id: MpoId) -> Bytes {
    let mut key = OUTCOMES_PREFIX.to_vec();
    key.extend_from_slice(&id.origin.to_be_bytes());
    key.extend_from_slice(&id.seq.to_be_bytes());
    Bytes::from(key)
}

/// The call a second op of MPO `id` on one shard runs instead of the MPO
/// ([`ANSWER`]).
pub fn answer_call(id: MpoId) -> ProcCall {
    let mut call = ProcCall::new(ANSWER, encode_id(id));
    call.strong = true;
    call
}

/// The op that records MPO `id`'s final timestamp `ts` in a shard's log
/// ([`STAMP`]).
pub fn stamp_call(id: MpoId, ts: u64) -> ProcCall {
    let mut args = encode_id(id).to_vec();
    args.extend_from_slice(&ts.to_be_bytes());
    let mut call = ProcCall::new(STAMP, Bytes::from(args));
    call.strong = true;
    call
}

/// The MPO and final timestamp a [`STAMP`] call records.
pub fn decode_stamp(args: &[u8]) -> Option<(MpoId, u64)> {
    let (id, ts) = args.split_at_checked(16)?;
    Some((decode_id(id)?, u64::from_be_bytes(ts.try_into().ok()?)))
}

/// Where a shard keeps which MPO holds index `index`.
pub fn order_key(index: u64) -> Bytes {
    let mut key = ORDER_PREFIX.to_vec();
    key.extend_from_slice(&index.to_be_bytes());
    Bytes::from(key)
}

fn encode_id(id: MpoId) -> Bytes {
    let mut b = id.origin.to_be_bytes().to_vec();
    b.extend_from_slice(&id.seq.to_be_bytes());
    Bytes::from(b)
}

fn decode_id(raw: &[u8]) -> Option<MpoId> {
    let (origin, seq) = raw.split_at_checked(8)?;
    Some(MpoId {
        origin: u64::from_be_bytes(origin.try_into().ok()?),
        seq: u64::from_be_bytes(seq.try_into().ok()?),
    })
}

/// The values a shard recorded under [`reads_key`].
pub fn decode_reads(raw: &Bytes) -> Option<Reads> {
    reads_from_value(&Value::decode_shared(raw).ok()?)
}

/// The index of the last MPO a shard committed, from its [`SEQ_KEY`].
pub fn decode_seq(raw: Option<&[u8]>) -> u64 {
    raw.and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_be_bytes)
}

/// Whether `key` is one of the replicas' own records rather than data a
/// call names: keys starting with 0x00, except keyspaces' data (a user
/// procedure's keys, `\0ks/NAME\0KEY`).
fn is_internal(key: &[u8]) -> bool {
    key.first() == Some(&INTERNAL_KEY_PREFIX) && !key.starts_with(crate::keyspace::DATA_PREFIX)
}

/// `key` as an error names it: a keyspace's key with its keyspace.
fn key_name(key: &[u8]) -> String {
    let Some(rest) = key.strip_prefix(crate::keyspace::DATA_PREFIX) else {
        return format!("key {}", Value::Bytes(Bytes::copy_from_slice(key)));
    };
    match rest.iter().position(|b| *b == 0) {
        Some(at) => format!(
            "key {} of keyspace {}",
            Value::Bytes(Bytes::copy_from_slice(&rest[at + 1..])),
            String::from_utf8_lossy(&rest[..at])
        ),
        None => format!("key {}", Value::Bytes(Bytes::copy_from_slice(key))),
    }
}

/// A snapshot in which the other shards' keys hold the values they read,
/// and only the declared keys can be seen: the first access to another
/// (a read, or a scan of data) is noted, reads as absent, and aborts the
/// call once it returns. Every involved shard runs the call on the same
/// values up to that access, so each notes the same one.
struct Overlay<'a> {
    local: &'a dyn SnapshotRead,
    remote: BTreeMap<Bytes, Option<Bytes>>,
    declared: BTreeSet<Bytes>,
    outside: std::cell::RefCell<Option<String>>,
}

impl Overlay<'_> {
    /// Whether the call may write `key`: one of the replicas' records, a
    /// declared key, or under a declared prefix.
    fn writable(&self, mpo: &MpoCall, key: &[u8]) -> bool {
        is_internal(key) || self.declared.contains(key) || mpo.parts.iter().any(|p| p.covers(key))
    }

    /// Whether `key` is another shard's to install: one of its keys, or
    /// under one of its prefixes.
    fn foreign(&self, mpo: &MpoCall, key: &[u8]) -> bool {
        self.remote.contains_key(key)
            || mpo.parts.iter().any(|p| p.shard != mpo.me && p.covers(key))
    }
}

impl Overlay<'_> {
    fn note(&self, what: impl FnOnce() -> String) {
        let mut outside = self.outside.borrow_mut();
        if outside.is_none() {
            *outside = Some(what());
        }
    }
}

impl SnapshotRead for Overlay<'_> {
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo) {
        // The shard's own map does not judge an operation across shards:
        // its parts are each shard's keys as the directory placed them when
        // it sequenced the operation (and reads of other shards' keys are
        // its inputs). Read as absent, and left out of its reads.
        if key == crate::ownership::MAP_KEY {
            return (None, VersionNo::ABSENT);
        }
        if !is_internal(key) && !self.declared.contains(key) {
            self.note(|| key_name(key));
            return (None, VersionNo::ABSENT);
        }
        match self.remote.get(key) {
            Some(v) => (v.clone(), VersionNo::ABSENT),
            None => self.local.read(key),
        }
    }

    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>) {
        if from >= to {
            return;
        }
        if !is_internal(from) || to.starts_with(crate::keyspace::DATA_PREFIX) {
            // A range of data: its keys are not declared one by one.
            self.note(|| format!("a scan from {}", key_name(from)));
            return;
        }
        let start = out.len();
        self.local.scan(from, to, limit, out);
        let remote = self
            .remote
            .range::<[u8], _>((
                std::ops::Bound::Included(from),
                std::ops::Bound::Excluded(to),
            ))
            .filter_map(|(k, v)| Some((k.clone(), v.clone()?, VersionNo::ABSENT)));
        let mut merged: Vec<_> = out
            .drain(start..)
            .filter(|(k, _, _)| !self.remote.contains_key(k))
            .chain(remote)
            .collect();
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        merged.truncate(limit);
        out.extend(merged);
    }
}

/// Register [`RUN`]: its arguments are checked when an op is invoked;
/// [`execute_call`] runs it through [`execute`], never through the body
/// registered here.
pub(crate) fn register(r: &mut Registry) {
    r.register_fn(
        RUN,
        false,
        |a| MpoCall::decode(&Bytes::copy_from_slice(a)).map(drop),
        |_, _| Err(Abort::new(format!("{RUN} runs through execute_call"))),
    );
    r.register_fn(
        STAMP,
        false,
        |a| {
            decode_stamp(a).map(drop).ok_or_else(|| {
                format!("{STAMP}: malformed arguments: expected an MPO id and a timestamp")
            })
        },
        |_, args| {
            // It changes nothing; a malformed one aborts like any call.
            decode_stamp(args)
                .map(|_| Bytes::new())
                .ok_or_else(|| Abort::new(format!("{STAMP}: malformed arguments")))
        },
    );
    r.register_fn(
        ANSWER,
        true,
        |a| {
            decode_id(a)
                .filter(|_| a.len() == 16)
                .map(drop)
                .ok_or_else(|| format!("{ANSWER}: malformed arguments: expected an MPO id"))
        },
        |txn, args| {
            let id = decode_id(args).ok_or_else(|| Abort::new(format!("{ANSWER}: no MPO id")))?;
            let raw = txn.get(&outcome_key(id)).ok_or_else(|| {
                Abort::new(format!(
                    "{id} ran as another op of this shard, and how it ended is no longer kept"
                ))
            })?;
            decode_answer(&raw)
                .unwrap_or_else(|| Err(Abort::new(format!("{ANSWER}: a malformed outcome record"))))
        },
    );
}

/// Run a [`RUN`] call: the client's call with the other shards' keys read
/// from the inputs (absent without inputs), installing only this shard's
/// writes. With inputs, it also records the index and this shard's reads
/// (see the module's text). Malformed arguments abort, changing nothing.
pub(crate) fn execute(
    registry: &Registry,
    snapshot: &dyn SnapshotRead,
    limits: TxnLimits,
    call: &ProcCall,
) -> Executed {
    let mpo = match MpoCall::decode(&call.args) {
        Ok(mpo) => mpo,
        Err(e) => {
            return Executed {
                reads: Vec::new(),
                scans: Vec::new(),
                writes: Vec::new(),
                outcome: Err(Abort(e)),
            }
        }
    };
    let remote: BTreeMap<Bytes, Option<Bytes>> = match &mpo.inputs {
        Some(inputs) => inputs.remote.iter().cloned().collect(),
        None => mpo
            .parts
            .iter()
            .filter(|p| p.shard != mpo.me)
            .flat_map(|p| p.keys.iter().map(|k| (k.clone(), None)))
            .collect(),
    };
    let declared = mpo
        .parts
        .iter()
        .flat_map(|p| p.keys.iter().cloned())
        .collect();
    let overlay = Overlay {
        local: snapshot,
        remote,
        declared,
        outside: std::cell::RefCell::new(None),
    };
    let inner = ProcCall {
        name: mpo.name.clone(),
        args: mpo.args.clone(),
        ..call.clone()
    };
    // With inputs, every shard follows the same session verdict: the
    // lowest involved shard's answer, if one has an answer.
    let answer = mpo.inputs.as_ref().and_then(|inputs| {
        let (own, reads) = verdict_of(&mpo, call, snapshot);
        let mut all: Vec<(u32, Option<creek_exec::txn::Outcome>)> = inputs
            .verdicts
            .iter()
            .map(|(s, v)| {
                let answer = v.as_ref().map(|b| {
                    decode_answer(b)
                        .unwrap_or_else(|| Err(Abort::new(format!("{RUN}: malformed verdict"))))
                });
                (*s, answer)
            })
            .collect();
        all.push((mpo.me, own));
        all.sort_by_key(|(s, _)| *s);
        all.into_iter().find_map(|(_, a)| a).map(|a| (a, reads))
    });
    let mut executed = match answer {
        Some((outcome, reads)) => Executed {
            reads,
            scans: Vec::new(),
            writes: Vec::new(),
            outcome,
        },
        None => execute_call(registry, &overlay, limits, &inner),
    };
    // An access outside the declared keys aborts the call, the same way on
    // every shard: the first read of one (every shard reads the same
    // values before it), else the least key written (no such read: every
    // shard made the same writes).
    let outside = overlay.outside.borrow_mut().take().or_else(|| {
        executed
            .writes
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !overlay.writable(&mpo, k))
            .min()
            .map(|k| key_name(k))
    });
    if let Some(what) = outside {
        executed.outcome = Err(Abort(format!(
            "{}: {what} {UNDECLARED}: an operation across shards touches only those",
            mpo.name
        )));
        executed.writes.clear();
        if let Some(id) = call.request_id {
            // Its session records the abort (a retry answers it again).
            crate::session::after(call, id, &executed.outcome, &mut executed.writes);
        }
    }
    executed
        .reads
        .retain(|(k, _)| !overlay.remote.contains_key(k) && k != crate::ownership::MAP_KEY);
    if !registry
        .planted()
        .has(creek_types::planted::Bug::MpoInstallRemoteWrite)
    {
        executed.writes.retain(|(k, _)| !overlay.foreign(&mpo, k));
    }
    for scan in &mut executed.scans {
        scan.keys.retain(|k| !overlay.remote.contains_key(k));
    }
    if let Some(inputs) = &mpo.inputs {
        record(&mpo, call, inputs, snapshot, &mut executed);
    }
    executed
}

/// Add to a committed copy's writes what its shard records (see the
/// module's text), and to its reads what that looked at.
fn record(
    mpo: &MpoCall,
    client: &ProcCall,
    inputs: &Inputs,
    snapshot: &dyn SnapshotRead,
    executed: &mut Executed,
) {
    let index = inputs.index;
    let mut reads: Vec<(Bytes, VersionNo)> = mpo
        .local_keys()
        .iter()
        .map(|k| (k.clone(), snapshot.read(k).1))
        .collect();
    let mut local = mpo.read_local(client, snapshot);
    if inputs.time != 0 {
        put_time(&mut local, inputs.time);
    }
    let mut writes = vec![
        (
            Bytes::from_static(SEQ_KEY),
            Some(Bytes::copy_from_slice(&index.to_be_bytes())),
        ),
        (reads_key(mpo.id), Some(reads_value(&local).encode())),
        (outcome_key(mpo.id), Some(encode_answer(&executed.outcome))),
        (order_key(index), Some(encode_id(mpo.id))),
    ];
    if let Some(old) = index.checked_sub(READS_KEPT).filter(|k| *k > 0) {
        let at = order_key(old);
        let (held, version) = snapshot.read(&at);
        reads.push((at.clone(), version));
        if let Some(id) = held.as_deref().and_then(decode_id) {
            writes.push((reads_key(id), None));
            writes.push((outcome_key(id), None));
        }
        writes.push((at, None));
    }
    for (k, version) in reads {
        if !executed.reads.iter().any(|(r, _)| *r == k) {
            executed.reads.push((k, version));
        }
    }
    executed.reads.sort_by(|a, b| a.0.cmp(&b.0));
    executed.writes.extend(writes);
    executed.writes.sort_by(|a, b| a.0.cmp(&b.0));
}

mod reads;
pub use reads::{
    put_time, reads_from_value, reads_value, split_reads, Read, Reads, TIME_KEY, VERDICT_KEY,
};

#[cfg(test)]
mod tests;
