//! The body of a `Creek.Mpo` message: what one replica tells or asks a
//! replica of another group about an operation across shards, encoded
//! with Creek's value encoding (a list whose first item is the kind).

use bytes::Bytes;
use creek_procs::moves::copy::{Entry, Page};
use creek_procs::moves::Fence;
use creek_procs::mpo::{reads_from_value, reads_value, MpoId, Reads};
use creek_types::value::Value;
use creek_types::{ClientRequestId, ProcCall};

/// What one replica asks of another about an MPO.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Invoke this shard's copy of an MPO (a [`creek_procs::mpo::RUN`]
    /// call), unless the replica holds one.
    Copy(ProcCall),
    /// Sequence `mpo` at the directory (idempotent): answered with the
    /// indices, once committed.
    Sequence {
        /// The MPO.
        mpo: MpoId,
        /// Its shards, ascending.
        shards: Vec<u32>,
    },
    /// The directory gave `mpo` index `index` among this shard's MPOs.
    Sequenced {
        /// The MPO.
        mpo: MpoId,
        /// Its index in the receiver's shard.
        index: u64,
    },
    /// The values shard `from` read for `mpo` at its committed position.
    Reads {
        /// The MPO.
        mpo: MpoId,
        /// The shard that read them.
        from: u32,
        /// Its session verdict, then its keys' values.
        reads: Reads,
    },
    /// The values the receiver's shard read for `mpo`, if it read them
    /// yet; the receiver invokes `copy` (its shard's copy) if it holds
    /// none.
    Pull {
        /// The MPO.
        mpo: MpoId,
        /// The receiver's shard's copy.
        copy: ProcCall,
    },
    /// Shard `from`'s stable time (docs/snapshot-reads.md, "Stable
    /// times"): two scalars, sent by the shard's leader to every replica
    /// of the other shards ([`crate::Node::stable_from`] there).
    Stable {
        /// The shard that published it.
        from: u32,
        /// Its stable time (µs).
        time: u64,
    },
    /// A page of the committed state of the move `map` holds (in flight or
    /// finishing; `creek_procs::moves::copy::export`) from stored key
    /// `from`, with digests instead of values if `digests`; answered
    /// [`Reply::Page`], or [`Reply::Pending`] while the replica's state
    /// executes under a map older than epoch `adopted` (0: any).
    Export {
        /// The encoded map holding the move.
        map: Bytes,
        /// The first stored key of the page.
        from: Bytes,
        /// Digests instead of values.
        digests: bool,
        /// The least epoch of the map the state must execute under.
        adopted: u64,
    },
    /// The committed values of `keys` ([`Reply::Reads`]; `None`: absent),
    /// or [`Reply::Pending`] as for [`Request::Export`].
    Fetch {
        /// The keys.
        keys: Vec<Bytes>,
        /// As for [`Request::Export`].
        adopted: u64,
    },
    /// The committed keys of the move `map` holds in `[from, next)`
    /// (`next` `None`: to the end), with their values ([`Reply::Reads`]),
    /// if the replica's state holds the mover's last chunk `fence`, else
    /// [`Reply::Pending`]: the target's copy as its mover compares it.
    Mine {
        /// The encoded map holding the move.
        map: Bytes,
        /// The first stored key of the range.
        from: Bytes,
        /// The first stored key after it.
        next: Option<Bytes>,
        /// The last chunk the state must hold.
        fence: Fence,
    },
    /// Run `call` as a strong op of the receiver's group; answered with
    /// its final outcome ([`Reply::Outcome`]) once it has one.
    Run(ProcCall),
    /// Messages that need no answer ([`Request::Sequenced`],
    /// [`Request::Reads`] and [`Request::Stable`]), several to one replica
    /// at once: each is taken in as if it came alone; answered
    /// [`Reply::Done`].
    Batch(Vec<Request>),
}

/// Most messages one [`Request::Batch`] carries.
pub const BATCH_MAX: usize = 256;

/// The answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Taken in.
    Done,
    /// The MPO's index on each of its shards.
    Indices(Vec<(u32, u64)>),
    /// The values asked for.
    Reads(Reads),
    /// Not read yet: ask again later.
    Pending,
    /// Ask replica `0` of the group instead (its leader, which commits
    /// first: a directory replica that is not the leader learns that a
    /// sequencing committed only with the leader's next message).
    Elsewhere(u16),
    /// A page of a move's keys.
    Page(Page),
    /// The final outcome of a [`Request::Run`]: its result, or its abort.
    Outcome(Result<Bytes, String>),
}

fn int(n: u64) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

fn uint(v: &Value) -> Result<u64, String> {
    v.as_int()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| format!("expected a non-negative int, got {v}"))
}

/// A 64-bit id as an int, every bit kept (a client's id is random).
fn bits(n: u64) -> Value {
    Value::Int(i64::from_be_bytes(n.to_be_bytes()))
}

fn bits_of(v: &Value) -> Result<u64, String> {
    v.as_int()
        .map(|n| u64::from_be_bytes(n.to_be_bytes()))
        .ok_or_else(|| format!("expected an int, got {v}"))
}

fn mpo_value(mpo: MpoId) -> [Value; 2] {
    [int(mpo.origin), int(mpo.seq)]
}

fn mpo_of(origin: &Value, seq: &Value) -> Result<MpoId, String> {
    Ok(MpoId {
        origin: uint(origin)?,
        seq: uint(seq)?,
    })
}

/// A call as a copy carries it: name, arguments, request id, the
/// client's acknowledged seqs, user. The op's time, level and id are the
/// invoking replica's to set.
fn call_value(call: &ProcCall) -> Value {
    Value::List(vec![
        Value::Bytes(Bytes::copy_from_slice(call.name.as_bytes())),
        Value::Bytes(call.args.clone()),
        match call.request_id {
            Some(r) => Value::List(vec![bits(r.client), int(r.seq)]),
            None => Value::Nil,
        },
        Value::List(call.acked.iter().map(|a| int(*a)).collect()),
        match &call.user {
            Some(u) => Value::Bytes(Bytes::copy_from_slice(u.as_bytes())),
            None => Value::Nil,
        },
    ])
}

fn call_of(v: &Value) -> Result<ProcCall, String> {
    let bad = || "a malformed call".to_owned();
    let [Value::Bytes(name), Value::Bytes(args), request, Value::List(acked), user] =
        v.as_list().ok_or_else(bad)?
    else {
        return Err(bad());
    };
    let name = std::str::from_utf8(name).map_err(|_| bad())?;
    let mut call = ProcCall::new(name, args.clone());
    call.request_id = match request {
        Value::Nil => None,
        Value::List(r) => match r.as_slice() {
            [client, seq] => Some(ClientRequestId {
                client: bits_of(client)?,
                seq: uint(seq)?,
            }),
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    call.acked = acked.iter().map(uint).collect::<Result<_, _>>()?;
    call.user = match user {
        Value::Nil => None,
        Value::Bytes(u) => Some(std::sync::Arc::from(
            std::str::from_utf8(u).map_err(|_| bad())?,
        )),
        _ => return Err(bad()),
    };
    Ok(call)
}

impl Request {
    /// Whether it needs no answer, so it may travel in a batch.
    pub fn batches(&self) -> bool {
        matches!(
            self,
            Request::Sequenced { .. } | Request::Reads { .. } | Request::Stable { .. }
        )
    }

    /// The message's bytes.
    pub fn encode(&self) -> Bytes {
        self.to_value().encode()
    }

    fn to_value(&self) -> Value {
        let items = match self {
            Request::Copy(call) => vec![Value::Int(0), call_value(call)],
            Request::Sequence { mpo, shards } => {
                let [o, s] = mpo_value(*mpo);
                let shards = shards.iter().map(|s| Value::Int(i64::from(*s))).collect();
                vec![Value::Int(1), o, s, Value::List(shards)]
            }
            Request::Sequenced { mpo, index } => {
                let [o, s] = mpo_value(*mpo);
                vec![Value::Int(2), o, s, int(*index)]
            }
            Request::Reads { mpo, from, reads } => {
                let [o, s] = mpo_value(*mpo);
                vec![
                    Value::Int(3),
                    o,
                    s,
                    Value::Int(i64::from(*from)),
                    reads_value(reads),
                ]
            }
            Request::Pull { mpo, copy } => {
                let [o, s] = mpo_value(*mpo);
                vec![Value::Int(4), o, s, call_value(copy)]
            }
            Request::Stable { from, time } => {
                vec![Value::Int(6), Value::Int(i64::from(*from)), int(*time)]
            }
            Request::Batch(all) => vec![
                Value::Int(5),
                Value::List(all.iter().map(Request::to_value).collect()),
            ],
            Request::Export {
                map,
                from,
                digests,
                adopted,
            } => vec![
                Value::Int(7),
                Value::Bytes(map.clone()),
                Value::Bytes(from.clone()),
                Value::Bool(*digests),
                int(*adopted),
            ],
            Request::Fetch { keys, adopted } => vec![
                Value::Int(8),
                Value::List(keys.iter().cloned().map(Value::Bytes).collect()),
                int(*adopted),
            ],
            Request::Mine {
                map,
                from,
                next,
                fence,
            } => vec![
                Value::Int(9),
                Value::Bytes(map.clone()),
                Value::Bytes(from.clone()),
                next.clone().map_or(Value::Nil, Value::Bytes),
                int(fence.term),
                int(fence.n),
            ],
            Request::Run(call) => vec![Value::Int(10), call_value(call)],
        };
        Value::List(items)
    }

    /// The message in `raw`, or why it is malformed.
    pub fn decode(raw: &[u8]) -> Result<Self, String> {
        let value = Value::decode(raw).map_err(|e| e.to_string())?;
        match value.as_list() {
            Some([Value::Int(5), Value::List(all)]) => {
                if all.len() > BATCH_MAX {
                    return Err(format!("a batch of more than {BATCH_MAX} messages"));
                }
                let all: Vec<Request> = all
                    .iter()
                    .map(Request::from_value)
                    .collect::<Result<_, _>>()?;
                if !all.iter().all(Request::batches) {
                    return Err("a batch may carry only indices, reads and stable times".to_owned());
                }
                Ok(Request::Batch(all))
            }
            _ => Request::from_value(&value),
        }
    }

    /// One message that is not a batch.
    fn from_value(value: &Value) -> Result<Self, String> {
        let items = value.as_list().ok_or("not a list")?;
        let shard = |v: &Value| {
            uint(v).and_then(|n| u32::try_from(n).map_err(|_| format!("shard {n} is too large")))
        };
        match items {
            [Value::Int(0), call] => Ok(Request::Copy(call_of(call)?)),
            [Value::Int(1), o, s, Value::List(shards)] => Ok(Request::Sequence {
                mpo: mpo_of(o, s)?,
                shards: shards.iter().map(shard).collect::<Result<_, _>>()?,
            }),
            [Value::Int(2), o, s, index] => Ok(Request::Sequenced {
                mpo: mpo_of(o, s)?,
                index: uint(index)?,
            }),
            [Value::Int(3), o, s, from, reads] => Ok(Request::Reads {
                mpo: mpo_of(o, s)?,
                from: shard(from)?,
                reads: reads_from_value(reads).ok_or("malformed reads")?,
            }),
            [Value::Int(4), o, s, copy] => Ok(Request::Pull {
                mpo: mpo_of(o, s)?,
                copy: call_of(copy)?,
            }),
            [Value::Int(6), from, time] => Ok(Request::Stable {
                from: shard(from)?,
                time: uint(time)?,
            }),
            [Value::Int(7), Value::Bytes(map), Value::Bytes(from), Value::Bool(digests), adopted] => {
                Ok(Request::Export {
                    map: map.clone(),
                    from: from.clone(),
                    digests: *digests,
                    adopted: uint(adopted)?,
                })
            }
            [Value::Int(8), Value::List(keys), adopted] => Ok(Request::Fetch {
                keys: keys
                    .iter()
                    .map(|k| match k {
                        Value::Bytes(k) => Ok(k.clone()),
                        _ => Err("a malformed key".to_owned()),
                    })
                    .collect::<Result<_, _>>()?,
                adopted: uint(adopted)?,
            }),
            [Value::Int(9), Value::Bytes(map), Value::Bytes(from), next, term, n] => {
                Ok(Request::Mine {
                    map: map.clone(),
                    from: from.clone(),
                    next: match next {
                        Value::Nil => None,
                        Value::Bytes(b) => Some(b.clone()),
                        _ => return Err("a malformed range end".to_owned()),
                    },
                    fence: Fence {
                        term: uint(term)?,
                        n: uint(n)?,
                    },
                })
            }
            [Value::Int(10), call] => Ok(Request::Run(call_of(call)?)),
            _ => Err("an unknown kind of message".to_owned()),
        }
    }
}

impl Reply {
    /// The answer's bytes.
    pub fn encode(&self) -> Bytes {
        let items = match self {
            Reply::Done => vec![Value::Int(0)],
            Reply::Indices(given) => vec![
                Value::Int(1),
                Value::List(
                    given
                        .iter()
                        .map(|(s, k)| Value::List(vec![Value::Int(i64::from(*s)), int(*k)]))
                        .collect(),
                ),
            ],
            Reply::Reads(reads) => vec![Value::Int(2), reads_value(reads)],
            Reply::Pending => vec![Value::Int(3)],
            Reply::Elsewhere(id) => vec![Value::Int(4), Value::Int(i64::from(*id))],
            Reply::Page(page) => vec![
                Value::Int(5),
                Value::Bytes(page.from.clone()),
                Value::List(
                    page.entries
                        .iter()
                        .map(|(k, e)| {
                            let (digest, bytes) = match e {
                                Entry::Value(v) => (false, v.clone()),
                                Entry::Digest(d) => (true, Bytes::copy_from_slice(d)),
                            };
                            Value::List(vec![
                                Value::Bytes(k.clone()),
                                Value::Bool(digest),
                                Value::Bytes(bytes),
                            ])
                        })
                        .collect(),
                ),
                page.next.clone().map_or(Value::Nil, Value::Bytes),
            ],
            Reply::Outcome(outcome) => match outcome {
                Ok(r) => vec![Value::Int(6), Value::Bool(true), Value::Bytes(r.clone())],
                Err(e) => vec![
                    Value::Int(6),
                    Value::Bool(false),
                    Value::Bytes(Bytes::copy_from_slice(e.as_bytes())),
                ],
            },
        };
        Value::List(items).encode()
    }

    /// The answer in `raw`, or why it is malformed.
    pub fn decode(raw: &[u8]) -> Result<Self, String> {
        let value = Value::decode(raw).map_err(|e| e.to_string())?;
        match value.as_list().ok_or("not a list")? {
            [Value::Int(0)] => Ok(Reply::Done),
            [Value::Int(1), given @ Value::List(_)] => {
                creek_procs::builtins::directory::decode_indices(&given.encode())
                    .map(Reply::Indices)
                    .ok_or_else(|| "malformed indices".to_owned())
            }
            [Value::Int(2), reads] => Ok(Reply::Reads(
                reads_from_value(reads).ok_or("malformed reads")?,
            )),
            [Value::Int(3)] => Ok(Reply::Pending),
            [Value::Int(4), id] => Ok(Reply::Elsewhere(
                u16::try_from(uint(id)?).map_err(|_| "a replica id past 65535".to_owned())?,
            )),
            [Value::Int(5), Value::Bytes(from), Value::List(entries), next] => {
                let entries = entries
                    .iter()
                    .map(|e| match e.as_list() {
                        Some([Value::Bytes(k), Value::Bool(false), Value::Bytes(v)]) => {
                            Ok((k.clone(), Entry::Value(v.clone())))
                        }
                        Some([Value::Bytes(k), Value::Bool(true), Value::Bytes(d)]) => {
                            let d: [u8; 16] = d[..]
                                .try_into()
                                .map_err(|_| "a digest of 16 bytes".to_owned())?;
                            Ok((k.clone(), Entry::Digest(d)))
                        }
                        _ => Err("a malformed page entry".to_owned()),
                    })
                    .collect::<Result<_, String>>()?;
                Ok(Reply::Page(Page {
                    from: from.clone(),
                    entries,
                    next: match next {
                        Value::Nil => None,
                        Value::Bytes(b) => Some(b.clone()),
                        _ => return Err("a malformed page end".to_owned()),
                    },
                }))
            }
            [Value::Int(6), Value::Bool(true), Value::Bytes(r)] => {
                Ok(Reply::Outcome(Ok(r.clone())))
            }
            [Value::Int(6), Value::Bool(false), Value::Bytes(e)] => {
                Ok(Reply::Outcome(Err(String::from_utf8_lossy(e).into_owned())))
            }
            _ => Err("an unknown kind of answer".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_message_and_answer_decodes_to_itself() {
        let mpo = MpoId { origin: 4, seq: 17 };
        let mut call = ProcCall::new("creek.mpo.run", Bytes::from_static(b"args"));
        // A client's id is random: its top bit is set half the time.
        call.request_id = Some(ClientRequestId {
            client: u64::MAX - 9,
            seq: 3,
        });
        call.acked = vec![1, 2];
        call.user = Some(std::sync::Arc::from("ann"));
        let reads: Reads = vec![
            (Bytes::from_static(b"\0v"), None),
            (Bytes::from_static(b"k"), Some(Bytes::from_static(b"7"))),
        ];
        for r in [
            Request::Copy(call.clone()),
            Request::Copy(ProcCall::new("x", Bytes::new())),
            Request::Sequence {
                mpo,
                shards: vec![0, 1],
            },
            Request::Sequenced { mpo, index: 5 },
            Request::Reads {
                mpo,
                from: 1,
                reads: reads.clone(),
            },
            Request::Pull {
                mpo,
                copy: call.clone(),
            },
            Request::Stable {
                from: 1,
                time: 1_733_000_000_000_000,
            },
            Request::Batch(vec![
                Request::Sequenced { mpo, index: 5 },
                Request::Reads {
                    mpo,
                    from: 1,
                    reads: reads.clone(),
                },
                Request::Stable { from: 0, time: 9 },
            ]),
            Request::Export {
                map: Bytes::from_static(b"map"),
                from: Bytes::from_static(b"k"),
                digests: true,
                adopted: 7,
            },
            Request::Fetch {
                keys: vec![Bytes::from_static(b"a"), Bytes::new()],
                adopted: 0,
            },
            Request::Mine {
                map: Bytes::from_static(b"map"),
                from: Bytes::new(),
                next: Some(Bytes::from_static(b"z")),
                fence: Fence { term: 3, n: 9 },
            },
            Request::Run(call.clone()),
        ] {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        // A batch carries only messages that need no answer, and is never
        // nested.
        for bad in [
            Request::Batch(vec![Request::Pull { mpo, copy: call }]),
            Request::Batch(vec![Request::Batch(Vec::new())]),
            Request::Batch(vec![Request::Sequenced { mpo, index: 1 }; BATCH_MAX + 1]),
        ] {
            assert!(Request::decode(&bad.encode()).is_err(), "{bad:?}");
        }
        for a in [
            Reply::Done,
            Reply::Indices(vec![(0, 3), (1, 9)]),
            Reply::Reads(reads),
            Reply::Pending,
            Reply::Elsewhere(8),
            Reply::Page(Page {
                from: Bytes::from_static(b"a"),
                entries: vec![
                    (
                        Bytes::from_static(b"b"),
                        Entry::Value(Bytes::from_static(b"v")),
                    ),
                    (Bytes::from_static(b"c"), Entry::Digest([7; 16])),
                ],
                next: Some(Bytes::from_static(b"d")),
            }),
            Reply::Page(Page::default()),
            Reply::Outcome(Ok(Bytes::from_static(b"r"))),
            Reply::Outcome(Err("WRONG_SHARD: no".into())),
        ] {
            assert_eq!(Reply::decode(&a.encode()).unwrap(), a);
        }
    }

    #[test]
    fn malformed_bodies_are_refused() {
        for raw in [
            &b""[..],
            &Value::Int(3).encode(),
            &Value::List(vec![Value::Int(9)]).encode(),
            &Value::List(vec![
                Value::Int(2),
                Value::Int(-1),
                Value::Int(0),
                Value::Int(1),
            ])
            .encode(),
        ] {
            assert!(Request::decode(raw).is_err());
            assert!(Reply::decode(raw).is_err());
        }
    }
}
