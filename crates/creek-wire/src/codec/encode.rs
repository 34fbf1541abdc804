//! Encoding: messages to frames, refusing what a peer would reject.

use super::*;

/// Why [`encode`] refuses a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The message exceeds a limit; peers would reject it.
    #[error("message exceeds {limit} = {max}: {len}")]
    LimitExceeded {
        /// The limit.
        limit: Limit,
        /// The message's size or count.
        len: u64,
        /// The limit's value.
        max: usize,
    },
    /// An op is strong without a causal context, or weak with one.
    #[error("op {id}: {}", mismatch(*.strong))]
    StrongContextMismatch {
        /// The op.
        id: OpId,
        /// Its `strong` flag.
        strong: bool,
    },
    /// An id (of an op, or in a pull or forward) has `seq == 0`.
    #[error("id {origin}.0 has seq 0, which is not a valid seq")]
    ZeroSeq {
        /// The id's origin.
        origin: ReplicaId,
    },
}

/// Encodes `msg` as one frame, refusing it if it exceeds `limits` or is
/// malformed (a strong op without a causal context or a weak op with one, an
/// id with `seq == 0`) — anything [`decode`] with the same limits rejects.
pub fn encode(msg: &PeerMessage, limits: &Limits) -> Result<Bytes, EncodeError> {
    check(msg, limits)?;
    let len = encoded_len(msg);
    if len > limits.frame_bytes_max {
        return Err(EncodeError::LimitExceeded {
            limit: Limit::FrameBytes,
            len: len as u64,
            max: limits.frame_bytes_max,
        });
    }
    let mut out = BytesMut::with_capacity(len);
    write_msg(&mut out, msg);
    debug_assert_eq!(out.len(), len);
    Ok(out.freeze())
}

/// The exact length of the frame [`encode`] produces for `msg` (whether or
/// not `encode` would accept it).
pub fn encoded_len(msg: &PeerMessage) -> usize {
    let mut counter = Counter(0);
    write_msg(&mut counter, msg);
    counter.0
}

/// Checks everything but the frame length.
fn check(msg: &PeerMessage, limits: &Limits) -> Result<(), EncodeError> {
    let over = |limit: Limit, len: usize| -> Result<(), EncodeError> {
        let max = limits.get(limit);
        if len > max {
            Err(EncodeError::LimitExceeded {
                limit,
                len: len as u64,
                max,
            })
        } else {
            Ok(())
        }
    };
    let ids = |ids: &[OpId]| -> Result<(), EncodeError> {
        over(Limit::IdsPerMessage, ids.len())?;
        match ids.iter().find(|id| id.seq == 0) {
            Some(id) => Err(EncodeError::ZeroSeq { origin: id.origin }),
            None => Ok(()),
        }
    };
    match msg {
        PeerMessage::Gossip(GossipMessage::Ops(ops)) => {
            over(Limit::OpsPerMessage, ops.len())?;
            for op in ops {
                if op.id.seq == 0 {
                    return Err(EncodeError::ZeroSeq {
                        origin: op.id.origin,
                    });
                }
                let user = op.call.user.as_deref().map_or(0, str::len);
                over(Limit::ProcNameBytes, op.call.name.len().max(user))?;
                over(Limit::ArgsBytes, op.call.args.len())?;
                if op.strong != op.causal_context.is_some() {
                    return Err(EncodeError::StrongContextMismatch {
                        id: op.id,
                        strong: op.strong,
                    });
                }
                if let Some(ctx) = &op.causal_context {
                    over(Limit::DvvExceptions, ctx.exceptions())?;
                }
            }
            Ok(())
        }
        PeerMessage::Gossip(GossipMessage::Digest { delivered }) => {
            over(Limit::IdsPerMessage, delivered.len())
        }
        PeerMessage::Gossip(GossipMessage::Pull { ids: list })
        | PeerMessage::Cab(CabMessage::Forward { ids: list }) => ids(list),
        PeerMessage::Cab(CabMessage::Raft(payload)) => over(Limit::RaftBytes, payload.len()),
        PeerMessage::Probe(_)
        | PeerMessage::Stable(_)
        | PeerMessage::Cab(CabMessage::Compact { .. }) => Ok(()),
        PeerMessage::Hello(h) => over(
            Limit::IdsPerMessage,
            h.founders.len().max(h.group.len()).max(h.voters.len()),
        ),
        PeerMessage::Snapshot(_) => Ok(()),
    }
}

/// Where encoded bytes go: a buffer, or a counter for [`encoded_len`].
trait Sink {
    fn put_byte(&mut self, b: u8);
    fn put_bytes(&mut self, b: &[u8]);
    fn put_u64le(&mut self, v: u64);
    fn put_varint(&mut self, v: u64);

    fn put_len(&mut self, n: usize) {
        self.put_varint(n as u64);
    }

    fn put_id(&mut self, id: OpId) {
        self.put_varint(u64::from(id.origin.0));
        self.put_varint(id.seq);
    }
}

impl Sink for BytesMut {
    fn put_byte(&mut self, b: u8) {
        self.put_u8(b);
    }

    fn put_bytes(&mut self, b: &[u8]) {
        self.put_slice(b);
    }

    fn put_u64le(&mut self, v: u64) {
        self.put_u64_le(v);
    }

    fn put_varint(&mut self, v: u64) {
        creek_types::varint::put(self, v);
    }
}

struct Counter(usize);

impl Sink for Counter {
    fn put_byte(&mut self, _: u8) {
        self.0 += 1;
    }

    fn put_bytes(&mut self, b: &[u8]) {
        self.0 += b.len();
    }

    fn put_u64le(&mut self, _: u64) {
        self.0 += 8;
    }

    fn put_varint(&mut self, v: u64) {
        self.0 += creek_types::varint::len(v);
    }
}

fn write_msg<S: Sink>(s: &mut S, msg: &PeerMessage) {
    s.put_byte(WIRE_VERSION);
    match msg {
        PeerMessage::Gossip(GossipMessage::Ops(ops)) => {
            s.put_byte(KIND_OPS);
            s.put_len(ops.len());
            for op in ops {
                write_op(s, op);
            }
        }
        PeerMessage::Gossip(GossipMessage::Digest { delivered }) => {
            s.put_byte(KIND_DIGEST);
            s.put_len(delivered.len());
            for &(origin, counter) in delivered {
                s.put_varint(u64::from(origin.0));
                s.put_varint(counter);
            }
        }
        PeerMessage::Gossip(GossipMessage::Pull { ids }) => {
            s.put_byte(KIND_PULL);
            write_ids(s, ids);
        }
        PeerMessage::Cab(CabMessage::Raft(payload)) => {
            s.put_byte(KIND_RAFT);
            s.put_len(payload.len());
            s.put_bytes(payload);
        }
        PeerMessage::Cab(CabMessage::Forward { ids }) => {
            s.put_byte(KIND_FORWARD);
            write_ids(s, ids);
        }
        PeerMessage::Cab(CabMessage::Compact { through }) => {
            s.put_byte(KIND_COMPACT);
            s.put_varint(*through);
        }
        PeerMessage::Probe(p) => {
            s.put_byte(if p.echo { KIND_PROBE_ECHO } else { KIND_PROBE });
            s.put_varint(p.stamp_us);
            s.put_varint(p.rtt_us);
        }
        PeerMessage::Stable(st) => {
            s.put_byte(KIND_STABLE);
            s.put_varint(st.applied_us);
            s.put_varint(st.global_us);
        }
        PeerMessage::Hello(h) => {
            s.put_byte(if h.reply {
                KIND_HELLO_REPLY
            } else {
                KIND_HELLO
            });
            s.put_u64le(h.nonce);
            s.put_byte(match h.state {
                MemberState::Joining => 0,
                MemberState::Member => 1,
                MemberState::Lost => 2,
            });
            s.put_len(h.founders.len());
            for &(replica, nonce) in &h.founders {
                s.put_varint(u64::from(replica.0));
                s.put_u64le(nonce);
            }
            s.put_varint(h.term);
            s.put_varint(h.peer_seq);
            s.put_varint(h.reserved);
            s.put_varint(h.peer_reserved);
            s.put_varint(h.floor);
            s.put_varint(h.last_index);
            for list in [&h.group, &h.voters] {
                s.put_len(list.len());
                for replica in list {
                    s.put_varint(u64::from(replica.0));
                }
            }
            s.put_varint(h.conf_index);
            let directory = crate::checkpoint::encode_directory(&h.directory);
            s.put_len(directory.len());
            s.put_bytes(&directory);
        }
        PeerMessage::Snapshot(SnapshotMessage::Fetch {
            transfer,
            min_index,
            offset,
        }) => {
            s.put_byte(KIND_SNAPSHOT_FETCH);
            s.put_varint(*transfer);
            s.put_varint(*min_index);
            s.put_varint(*offset);
        }
        PeerMessage::Snapshot(SnapshotMessage::Chunk(c)) => {
            s.put_byte(KIND_SNAPSHOT_CHUNK);
            for v in [c.transfer, c.index, c.term, c.total_len] {
                s.put_varint(v);
            }
            s.put_bytes(&c.checksum.to_le_bytes());
            s.put_varint(c.offset);
            s.put_len(c.data.len());
            s.put_bytes(&c.data);
        }
        PeerMessage::Snapshot(SnapshotMessage::Refused { transfer, retry }) => {
            s.put_byte(KIND_SNAPSHOT_REFUSED);
            s.put_varint(*transfer);
            s.put_byte(u8::from(*retry));
        }
    }
}

fn write_ids<S: Sink>(s: &mut S, ids: &[OpId]) {
    s.put_len(ids.len());
    for &id in ids {
        s.put_id(id);
    }
}

fn write_op<S: Sink>(s: &mut S, op: &Op) {
    s.put_id(op.id);
    s.put_u64le(op.timestamp.0);
    let mut flags = 0;
    if op.strong {
        flags |= FLAG_STRONG;
    }
    if op.causal_context.is_some() {
        flags |= FLAG_CONTEXT;
    }
    if op.call.request_id.is_some() {
        flags |= FLAG_REQUEST_ID;
    }
    if !op.call.acked.is_empty() {
        flags |= FLAG_ACKED;
    }
    if op.call.user.is_some() {
        flags |= FLAG_USER;
    }
    s.put_byte(flags);
    s.put_len(op.call.name.len());
    s.put_bytes(op.call.name.as_bytes());
    s.put_len(op.call.args.len());
    s.put_bytes(&op.call.args);
    if let Some(rid) = op.call.request_id {
        s.put_u64le(rid.client);
        s.put_varint(rid.seq);
    }
    if !op.call.acked.is_empty() {
        s.put_len(op.call.acked.len());
        for &seq in &op.call.acked {
            s.put_varint(seq);
        }
    }
    if let Some(user) = &op.call.user {
        s.put_len(user.len());
        s.put_bytes(user.as_bytes());
    }
    if let Some(ctx) = &op.causal_context {
        write_dvv(s, ctx);
    }
}

/// Encodes one op on its own, exactly as it appears inside an `Ops` frame
/// (the *op* fields of the module docs, without a frame header). For storing
/// payloads (`creek-store`); no limit is checked, so decode with limits at
/// least as large as anything the node accepted.
pub fn encode_op(op: &Op) -> Bytes {
    let mut counter = Counter(0);
    write_op(&mut counter, op);
    let mut out = BytesMut::with_capacity(counter.0);
    write_op(&mut out, op);
    debug_assert_eq!(out.len(), counter.0);
    out.freeze()
}

fn write_dvv<S: Sink>(s: &mut S, dvv: &Dvv) {
    let records = dvv.to_runs();
    s.put_len(records.len());
    for (origin, counter, runs) in &records {
        s.put_varint(u64::from(origin.0));
        s.put_varint(*counter);
        s.put_len(run_seqs(runs));
        for gap in exception_gaps(*counter, runs) {
            s.put_varint(gap);
        }
    }
}
