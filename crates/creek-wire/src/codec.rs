//! The binary encoding of [`PeerMessage`]: the protocol reference for
//! implementations in other languages.
//!
//! # Frame
//!
//! A frame is one complete message; framing on the stream (e.g. a length
//! prefix) is the transport's business. Every frame is
//!
//! | offset | size | field                                              |
//! |--------|------|----------------------------------------------------|
//! | 0      | 1    | wire version, [`WIRE_VERSION`] (= 2)               |
//! | 1      | 1    | message kind (table below)                         |
//! | 2      | rest | body of that kind; nothing may follow it           |
//!
//! A decoder checks the version byte before anything else and rejects other
//! versions with [`DecodeError::UnsupportedVersion`], so a node meeting a
//! peer of a newer version reports that rather than garbage. It then checks
//! the whole frame's length against `frame_bytes_max`.
//!
//! | kind | message                   | body                                           |
//! |------|---------------------------|------------------------------------------------|
//! | 0x01 | [`GossipMessage::Ops`]    | `count` (≤ `ops_per_message_max`), `count` × *op* |
//! | 0x02 | [`GossipMessage::Digest`] | `count` (≤ `ids_per_message_max`), `count` × (`origin`, `counter`) |
//! | 0x03 | [`GossipMessage::Pull`]   | `count` (≤ `ids_per_message_max`), `count` × *id* |
//! | 0x11 | [`CabMessage::Raft`]      | `len` (≤ `raft_bytes_max`), `len` opaque bytes |
//! | 0x12 | [`CabMessage::Forward`]   | `count` (≤ `ids_per_message_max`), `count` × *id* |
//! | 0x13 | [`CabMessage::Compact`]   | `through`                                      |
//! | 0x21 | [`Probe`]                 | `stamp_us`, `rtt_us`                           |
//! | 0x22 | [`Probe`] (its echo)      | `stamp_us`, `rtt_us`                           |
//! | 0x23 | [`Hello`]                 | `nonce: u64le`, `state` (1 byte: 0 joining, 1 member, 2 lost), `count` (≤ `ids_per_message_max`), `count` × (`origin`, `nonce: u64le`), `term`, `peer_seq`, `reserved`, `peer_reserved`, `floor`, `last_index`, the group and then its voters, each `count` (≤ `ids_per_message_max`), `count` × `replica`; `conf_index`, `len`, `len` bytes (the directory, as the checkpoint's group section writes it) |
//! | 0x24 | [`Hello`] (a reply)       | as 0x23                                        |
//! | 0x31 | [`SnapshotMessage::Fetch`] | `transfer`, `min_index`, `offset`            |
//! | 0x32 | [`SnapshotMessage::Chunk`] | `transfer`, `index`, `term`, `total_len`, `checksum: u32le`, `offset`, `len`, `len` bytes |
//! | 0x33 | [`SnapshotMessage::Refused`] | `transfer`, `retry` (1 byte: 0 or 1)       |
//!
//! Other kinds are rejected. The `…_max` names are the fields of [`Limits`].
//!
//! # Field encodings
//!
//! Unless stated otherwise an integer (`count`, `len`, `seq`, `counter`,
//! `origin`, `gap`) is an unsigned LEB128 varint: 7 bits per byte, least
//! significant group first, high bit set on every byte but the last. A
//! varint must be in its shortest form and fit in 64 bits; an `origin` (a
//! replica id) must fit in 16 bits. `u64le` is 8 bytes, little-endian.
//!
//! An *id* is `origin`, `seq` with `seq ≥ 1`. An *op* is these fields, in
//! order:
//!
//! | field          | encoding                                                   |
//! |----------------|------------------------------------------------------------|
//! | id             | *id*                                                       |
//! | timestamp      | `u64le`, the raw hybrid-logical-clock value                |
//! | flags          | 1 byte: bit 0 strong, bit 1 causal context present, bit 2 request id present, bit 3 acknowledged seqs present (only with a request id), bit 4 user present; bits 5–7 must be 0, and bits 0 and 1 must be equal (a strong op, and only a strong op, carries a causal context) |
//! | name           | `len` (≤ `proc_name_bytes_max`), then the procedure name, UTF-8 |
//! | args           | `len` (≤ `args_bytes_max`), then the argument bytes        |
//! | request id     | only if flags bit 2: `client: u64le`, `seq` (any value)    |
//! | acknowledged   | only if flags bit 3: count, then that many `seq`s: the client's earlier requests whose session entries this op deletes |
//! | user           | only if flags bit 4: `len` (≤ `proc_name_bytes_max`), then the name of the user who invoked it, UTF-8 (replicas that check users) |
//! | causal context | only if flags bit 1: `count`, then `count` × *record*      |
//!
//! A *record* is `origin`, `counter`, `n` (the total of `n` over one
//! context ≤ `dvv_exceptions_max`), then `n` × `gap`. The number of records
//! is bounded by the frame only.
//!
//! A causal context (a [`creek_core::Dvv`]) is a list of records, one per
//! origin: the seqs `1..=counter` plus `n` exception seqs `x1 < x2 < … < xn`,
//! sent as gaps: `x1 = counter + g1 + 1` and `xi = x(i-1) + gi + 1`. An
//! encoder sends the normalized form (origins strictly increasing, no empty
//! record, `x1 > counter + 1`, i.e. `g1 ≥ 1`). A decoder accepts any records
//! whose seqs fit in 64 bits and normalizes them (merging duplicated origins,
//! absorbing exceptions that continue the counter, dropping empty records),
//! so a decoded message re-encodes to its normalized frame, which is never
//! longer than the frame it was decoded from.
//!
//! Digest entries and id lists are sent in the order of the message and not
//! otherwise checked (a digest entry's `counter` may be 0).
//!
//! # Limits
//!
//! [`Limits`] bounds the frame size and every count and length in it.
//! [`encode`] refuses a message that exceeds a limit (so a node never sends
//! what a peer with the same limits would reject), and [`decode`] rejects such
//! a frame. [`decode`] never panics and allocates memory proportional to the
//! frame: every count and length is checked against the limits and against
//! the bytes that remain before anything is reserved.
//!
//! # Examples
//!
//! `Forward { ids: [r3.17] }` is the frame `01 12 01 03 11`: version 1, kind
//! 0x12, one id, origin 3, seq 17.
//!
//! The echo of a probe stamped 300 µs, from a replica that has measured no
//! round trip yet, is `01 22 ac 02 00`.
//!
//! `Digest { delivered: [(r0, 0), (r300, 128)] }` is
//! `01 02 02 00 00 ac 02 80 01`.
//!
//! `Ops` holding one strong op r1.5 at timestamp `0x0102030405060708`
//! calling `inc` with arguments `aa`, request id (client 7, seq 2) and
//! causal context {r1.1, r1.2, r1.3, r1.6} is
//!
//! ```text
//! 01 01                    version 1, kind Ops
//! 01                       1 op
//! 01 05                    id r1.5
//! 08 07 06 05 04 03 02 01  timestamp
//! 07                       flags: strong, context, request id
//! 03 69 6e 63              name "inc"
//! 01 aa                    args
//! 07 00 00 00 00 00 00 00  request id: client 7
//! 02                                    seq 2
//! 01                       context: 1 record
//! 01 03 01 02              r1, counter 3, 1 exception: 3 + 2 + 1 = 6
//! ```
//!
//! These frames are checked by the crate's tests.

use std::fmt;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use creek_core::{Dvv, Op, OpId, ReplicaId, Timestamp};
use creek_exec::{ClientRequestId, ProcCall};

use crate::{
    CabMessage, GossipMessage, Hello, MemberState, PeerMessage, Probe, SnapshotChunk,
    SnapshotMessage,
};

/// Version of the frame format, the first byte of every frame.
pub const WIRE_VERSION: u8 = 2;

const KIND_OPS: u8 = 0x01;
const KIND_DIGEST: u8 = 0x02;
const KIND_PULL: u8 = 0x03;
const KIND_RAFT: u8 = 0x11;
const KIND_FORWARD: u8 = 0x12;
const KIND_COMPACT: u8 = 0x13;
const KIND_PROBE: u8 = 0x21;
const KIND_PROBE_ECHO: u8 = 0x22;
const KIND_HELLO: u8 = 0x23;
const KIND_HELLO_REPLY: u8 = 0x24;
const KIND_SNAPSHOT_FETCH: u8 = 0x31;
const KIND_SNAPSHOT_CHUNK: u8 = 0x32;
const KIND_SNAPSHOT_REFUSED: u8 = 0x33;

const FLAG_STRONG: u8 = 0x01;
const FLAG_CONTEXT: u8 = 0x02;
const FLAG_REQUEST_ID: u8 = 0x04;
const FLAG_ACKED: u8 = 0x08;
const FLAG_USER: u8 = 0x10;
const FLAGS_KNOWN: u8 = FLAG_STRONG | FLAG_CONTEXT | FLAG_REQUEST_ID | FLAG_ACKED | FLAG_USER;

/// Fewest bytes an encoded op takes: origin, seq, timestamp, flags, name
/// length, args length.
const OP_BYTES_MIN: usize = 1 + 1 + 8 + 1 + 1 + 1;
/// Fewest bytes an encoded id or digest entry takes.
const ID_BYTES_MIN: usize = 2;
/// Fewest bytes an encoded causal-context record takes.
const RECORD_BYTES_MIN: usize = 3;

/// Size limits of frames, shared by [`encode`] and [`decode`].
///
/// All replicas of a cluster should use the same limits; a frame accepted
/// by the encoder is then accepted by every peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes in one frame, header included (default 16 MiB).
    pub frame_bytes_max: usize,
    /// Most ops in one [`GossipMessage::Ops`] (default 65 536).
    pub ops_per_message_max: usize,
    /// Most entries in one [`GossipMessage::Digest`], or ids in one
    /// [`GossipMessage::Pull`] or [`CabMessage::Forward`] (default 1 000 000).
    pub ids_per_message_max: usize,
    /// Most bytes in one procedure name, or in the name of the user an op
    /// carries (default 256).
    pub proc_name_bytes_max: usize,
    /// Most bytes in one call's arguments (default 4 MiB).
    pub args_bytes_max: usize,
    /// Most exception seqs in one op's causal context, as sent (default
    /// 1 000 000).
    pub dvv_exceptions_max: usize,
    /// Most bytes in one [`CabMessage::Raft`] payload (default 16 MiB).
    pub raft_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            frame_bytes_max: 16 << 20,
            ops_per_message_max: 65_536,
            ids_per_message_max: 1_000_000,
            proc_name_bytes_max: 256,
            args_bytes_max: 4 << 20,
            dvv_exceptions_max: 1_000_000,
            raft_bytes_max: 16 << 20,
        }
    }
}

impl Limits {
    /// The value of one limit.
    pub fn get(&self, limit: Limit) -> usize {
        match limit {
            Limit::FrameBytes => self.frame_bytes_max,
            Limit::OpsPerMessage => self.ops_per_message_max,
            Limit::IdsPerMessage => self.ids_per_message_max,
            Limit::ProcNameBytes => self.proc_name_bytes_max,
            Limit::ArgsBytes => self.args_bytes_max,
            Limit::DvvExceptions => self.dvv_exceptions_max,
            Limit::RaftBytes => self.raft_bytes_max,
        }
    }

    /// Checks that the limits make sense: every limit is at least 1, and
    /// no byte limit of a part of a frame exceeds the frame limit.
    pub fn validate(&self) -> Result<(), LimitsError> {
        for limit in Limit::ALL {
            if self.get(limit) == 0 {
                return Err(LimitsError::Zero { limit });
            }
        }
        for limit in [Limit::ProcNameBytes, Limit::ArgsBytes, Limit::RaftBytes] {
            let value = self.get(limit);
            if value > self.frame_bytes_max {
                return Err(LimitsError::ExceedsFrame {
                    limit,
                    value,
                    frame_bytes_max: self.frame_bytes_max,
                });
            }
        }
        Ok(())
    }
}

/// Names one field of [`Limits`]; displayed as the field name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// [`Limits::frame_bytes_max`].
    FrameBytes,
    /// [`Limits::ops_per_message_max`].
    OpsPerMessage,
    /// [`Limits::ids_per_message_max`].
    IdsPerMessage,
    /// [`Limits::proc_name_bytes_max`].
    ProcNameBytes,
    /// [`Limits::args_bytes_max`].
    ArgsBytes,
    /// [`Limits::dvv_exceptions_max`].
    DvvExceptions,
    /// [`Limits::raft_bytes_max`].
    RaftBytes,
}

impl Limit {
    /// Every limit.
    pub const ALL: [Limit; 7] = [
        Limit::FrameBytes,
        Limit::OpsPerMessage,
        Limit::IdsPerMessage,
        Limit::ProcNameBytes,
        Limit::ArgsBytes,
        Limit::DvvExceptions,
        Limit::RaftBytes,
    ];

    /// The name of the [`Limits`] field.
    pub fn name(self) -> &'static str {
        match self {
            Limit::FrameBytes => "frame_bytes_max",
            Limit::OpsPerMessage => "ops_per_message_max",
            Limit::IdsPerMessage => "ids_per_message_max",
            Limit::ProcNameBytes => "proc_name_bytes_max",
            Limit::ArgsBytes => "args_bytes_max",
            Limit::DvvExceptions => "dvv_exceptions_max",
            Limit::RaftBytes => "raft_bytes_max",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a [`Limits`] value is refused by [`Limits::validate`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsError {
    /// A limit is 0.
    #[error("{limit} must be at least 1")]
    Zero {
        /// The limit.
        limit: Limit,
    },
    /// A part of a frame may be larger than a whole frame.
    #[error("{limit} = {value} exceeds frame_bytes_max = {frame_bytes_max}")]
    ExceedsFrame {
        /// The limit.
        limit: Limit,
        /// Its value.
        value: usize,
        /// The frame limit.
        frame_bytes_max: usize,
    },
}

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

/// Why [`decode`] rejects a frame. Offsets are byte positions in the frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The frame ends in the middle of a message.
    #[error("frame ends unexpectedly at byte {offset}")]
    UnexpectedEnd {
        /// Where more input was needed.
        offset: usize,
    },
    /// The frame is of another version of the format.
    #[error("unsupported wire version {got} (this node speaks version {supported})")]
    UnsupportedVersion {
        /// The frame's version byte.
        got: u8,
        /// The version this node speaks, [`WIRE_VERSION`].
        supported: u8,
    },
    /// The message-kind byte names no message.
    #[error("unknown message kind 0x{tag:02x} at byte {offset}")]
    UnknownKind {
        /// The kind byte.
        tag: u8,
        /// Where it is.
        offset: usize,
    },
    /// A varint does not fit in 64 bits.
    #[error("varint at byte {offset} overflows 64 bits")]
    VarintOverflow {
        /// Where the varint starts.
        offset: usize,
    },
    /// A varint is longer than it needs to be.
    #[error("varint at byte {offset} is not in its shortest form")]
    NonCanonicalVarint {
        /// Where the varint starts.
        offset: usize,
    },
    /// A replica id does not fit in 16 bits.
    #[error("replica id {value} at byte {offset} does not fit in 16 bits")]
    ReplicaIdOutOfRange {
        /// The value.
        value: u64,
        /// Where it starts.
        offset: usize,
    },
    /// An id has `seq == 0`.
    #[error("seq 0 at byte {offset} is not a valid seq")]
    ZeroSeq {
        /// Where the seq starts.
        offset: usize,
    },
    /// A frame, count or length exceeds a [`Limits`] value.
    #[error("{len} at byte {offset} exceeds {limit} = {max}")]
    LimitExceeded {
        /// The limit.
        limit: Limit,
        /// The frame length, or the declared count or length.
        len: u64,
        /// The limit's value.
        max: usize,
        /// Where the count or length starts (0 for the frame length).
        offset: usize,
    },
    /// A count or length claims more than the rest of the frame can hold.
    #[error(
        "declared length {len} at byte {offset} exceeds what the {remaining} remaining bytes can hold"
    )]
    LengthTooLarge {
        /// The declared count or length.
        len: u64,
        /// Where it starts.
        offset: usize,
        /// Bytes left after it.
        remaining: usize,
    },
    /// A procedure name is not UTF-8.
    #[error("procedure name at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Where the name's bytes start.
        offset: usize,
    },
    /// An op's flags set bits that mean nothing.
    #[error("op flags 0x{flags:02x} at byte {offset} set unknown bits")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
        /// Where it is.
        offset: usize,
    },
    /// An op is strong without a causal context, or weak with one.
    #[error("op flags at byte {offset}: {}", mismatch(*.strong))]
    StrongContextMismatch {
        /// The op's `strong` flag.
        strong: bool,
        /// Where the flags byte is.
        offset: usize,
    },
    /// A causal context's exception seq exceeds `u64::MAX`.
    #[error("exception seq gap at byte {offset} overflows 64 bits")]
    SeqOverflow {
        /// Where the gap starts.
        offset: usize,
    },
    /// A hello's state byte means nothing.
    #[error("member state {state} at byte {offset} is not 0, 1 or 2")]
    UnknownMemberState {
        /// The byte.
        state: u8,
        /// Where it is.
        offset: usize,
    },
    /// A hello's directory does not decode.
    #[error("directory at byte {offset}: {why}")]
    MalformedDirectory {
        /// Where its length starts.
        offset: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A flag byte is neither 0 nor 1.
    #[error("flag {value} at byte {offset} is not 0 or 1")]
    NotABool {
        /// The byte.
        value: u8,
        /// Where it is.
        offset: usize,
    },
    /// Bytes follow a complete message.
    #[error("{count} trailing bytes after the message, from byte {offset}")]
    TrailingBytes {
        /// How many.
        count: usize,
        /// Where they start.
        offset: usize,
    },
}

fn mismatch(strong: bool) -> &'static str {
    if strong {
        "a strong op must carry a causal context"
    } else {
        "a weak op must not carry a causal context"
    }
}

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

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
        PeerMessage::Probe(_) | PeerMessage::Cab(CabMessage::Compact { .. }) => Ok(()),
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
        creek_exec::varint::put(self, v);
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
        self.0 += creek_exec::varint::len(v);
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

/// The number of seqs in `runs` (an in-memory set's, so it fits).
pub(crate) fn run_seqs(runs: &[(u64, u64)]) -> usize {
    runs.iter()
        .map(|&(s, e)| usize::try_from(e - s + 1).unwrap_or(usize::MAX))
        .fold(0, usize::saturating_add)
}

/// The encoded gaps of a record's exceptions: the first seq of each run
/// as its distance past the previous seq (`x - prev - 1`, the first from
/// the counter), then a 0 for each further seq of the run.
pub(crate) fn exception_gaps(counter: u64, runs: &[(u64, u64)]) -> impl Iterator<Item = u64> + '_ {
    let mut prev = counter;
    runs.iter().flat_map(move |&(s, e)| {
        // Normalized runs lie above the counter and above each other;
        // wrapping keeps this total for any input.
        let first = s.wrapping_sub(prev).wrapping_sub(1);
        prev = e;
        std::iter::once(first).chain(std::iter::repeat_n(0, (e - s) as usize))
    })
}

/// Rebuilds a record's exceptions as runs from their encoded gaps (see
/// [`exception_gaps`]); `None` once a seq would overflow.
pub(crate) struct RunsFromGaps {
    prev: u64,
    runs: Vec<(u64, u64)>,
}

impl RunsFromGaps {
    pub(crate) fn new(counter: u64) -> Self {
        RunsFromGaps {
            prev: counter,
            runs: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, gap: u64) -> Option<()> {
        let x = self.prev.checked_add(gap)?.checked_add(1)?;
        match self.runs.last_mut() {
            Some((_, end)) if gap == 0 => *end = x,
            _ => self.runs.push((x, x)),
        }
        self.prev = x;
        Some(())
    }

    pub(crate) fn finish(self) -> Vec<(u64, u64)> {
        self.runs
    }
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

/// Decodes one frame. Byte strings in the message (arguments, Raft payloads)
/// are copied out of `frame`; see [`decode_bytes`] to share them instead.
///
/// Never panics; allocates memory proportional to `frame.len()`.
pub fn decode(frame: &[u8], limits: &Limits) -> Result<PeerMessage, DecodeError> {
    Reader {
        buf: frame,
        shared: None,
        pos: 0,
        limits,
    }
    .frame()
}

/// Decodes one frame like [`decode`], but the message's byte strings
/// (arguments, Raft payloads) are slices of `frame`, without copies.
///
/// Each such slice keeps the whole frame's buffer alive; a receiver that
/// keeps a few small ops of a large frame for long may prefer [`decode`].
pub fn decode_bytes(frame: &Bytes, limits: &Limits) -> Result<PeerMessage, DecodeError> {
    Reader {
        buf: frame,
        shared: Some(frame),
        pos: 0,
        limits,
    }
    .frame()
}

/// Decodes one op encoded by [`encode_op`]; the whole input must be that
/// op. Byte strings of the op share `bytes`. Never panics.
pub fn decode_op(bytes: &Bytes, limits: &Limits) -> Result<Op, DecodeError> {
    let mut reader = Reader {
        buf: bytes,
        shared: Some(bytes),
        pos: 0,
        limits,
    };
    let op = reader.op()?;
    let count = reader.remaining();
    if count > 0 {
        return Err(DecodeError::TrailingBytes {
            count,
            offset: reader.pos,
        });
    }
    Ok(op)
}

/// A cursor over the frame; every access is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
    /// The same bytes as `buf`, when byte strings may share them.
    shared: Option<&'a Bytes>,
    pos: usize,
    limits: &'a Limits,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(DecodeError::UnexpectedEnd { offset: self.pos })?;
        self.pos += 1;
        Ok(b)
    }

    fn slice(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        let end = start
            .checked_add(len)
            .ok_or(DecodeError::UnexpectedEnd { offset: start })?;
        let s = self.buf.get(start..end).ok_or(DecodeError::UnexpectedEnd {
            offset: self.buf.len(),
        })?;
        self.pos = end;
        Ok(s)
    }

    fn u64le(&mut self) -> Result<u64, DecodeError> {
        let s = self.slice(8)?;
        let arr: [u8; 8] = s
            .try_into()
            .map_err(|_| DecodeError::UnexpectedEnd { offset: self.pos })?;
        Ok(u64::from_le_bytes(arr))
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        use creek_exec::varint::{get, VarintError};
        let offset = self.pos;
        get(self.buf, &mut self.pos).map_err(|e| match e {
            VarintError::UnexpectedEnd => DecodeError::UnexpectedEnd { offset: self.pos },
            VarintError::Overflow => DecodeError::VarintOverflow { offset },
            VarintError::NonCanonical => DecodeError::NonCanonicalVarint { offset },
        })
    }

    fn replica(&mut self) -> Result<ReplicaId, DecodeError> {
        let offset = self.pos;
        let value = self.varint()?;
        u16::try_from(value)
            .map(ReplicaId)
            .map_err(|_| DecodeError::ReplicaIdOutOfRange { value, offset })
    }

    fn id(&mut self) -> Result<OpId, DecodeError> {
        let origin = self.replica()?;
        let offset = self.pos;
        let seq = self.varint()?;
        if seq == 0 {
            return Err(DecodeError::ZeroSeq { offset });
        }
        Ok(OpId { origin, seq })
    }

    /// A count or byte length: at most `limit` (if any), and at most what
    /// the rest of the frame can hold given that each unit takes at least
    /// `unit_bytes_min` bytes. So whatever is reserved for the units is
    /// proportional to the frame.
    fn length(
        &mut self,
        limit: Option<Limit>,
        unit_bytes_min: usize,
    ) -> Result<usize, DecodeError> {
        let offset = self.pos;
        let len = self.varint()?;
        if let Some(limit) = limit {
            let max = self.limits.get(limit);
            if len > max as u64 {
                return Err(DecodeError::LimitExceeded {
                    limit,
                    len,
                    max,
                    offset,
                });
            }
        }
        let remaining = self.remaining();
        match usize::try_from(len) {
            Ok(n) if n <= remaining / unit_bytes_min.max(1) => Ok(n),
            _ => Err(DecodeError::LengthTooLarge {
                len,
                offset,
                remaining,
            }),
        }
    }

    /// A length-prefixed byte string, shared with the frame if possible.
    fn bytes(&mut self, limit: Limit) -> Result<Bytes, DecodeError> {
        self.bytes_within(Some(limit))
    }

    /// A length-prefixed byte string under `limit`, or under the frame's
    /// length only (`None`); shared with the frame if possible.
    fn bytes_within(&mut self, limit: Option<Limit>) -> Result<Bytes, DecodeError> {
        let len = self.length(limit, 1)?;
        let start = self.pos;
        let s = self.slice(len)?;
        Ok(match self.shared {
            Some(shared) => shared.slice(start..self.pos),
            None => Bytes::copy_from_slice(s),
        })
    }

    fn hello(&mut self, kind: u8) -> Result<Hello, DecodeError> {
        let nonce = self.u64le()?;
        let offset = self.pos;
        let state = match self.byte()? {
            0 => MemberState::Joining,
            1 => MemberState::Member,
            2 => MemberState::Lost,
            state => return Err(DecodeError::UnknownMemberState { state, offset }),
        };
        // Each founder takes at least 9 bytes (a varint and a u64le).
        let count = self.length(Some(Limit::IdsPerMessage), 9)?;
        let founders = (0..count)
            .map(|_| Ok((self.replica()?, self.u64le()?)))
            .collect::<Result<_, DecodeError>>()?;
        let term = self.varint()?;
        let peer_seq = self.varint()?;
        let reserved = self.varint()?;
        let peer_reserved = self.varint()?;
        let floor = self.varint()?;
        let last_index = self.varint()?;
        let mut replicas = || {
            let count = self.length(Some(Limit::IdsPerMessage), 1)?;
            (0..count)
                .map(|_| self.replica())
                .collect::<Result<Vec<_>, DecodeError>>()
        };
        let group = replicas()?;
        let voters = replicas()?;
        let conf_index = self.varint()?;
        let offset = self.pos;
        let directory = crate::checkpoint::decode_directory(&self.bytes_within(None)?)
            .map_err(|e| DecodeError::MalformedDirectory { offset, why: e.0 })?;
        Ok(Hello {
            nonce,
            state,
            founders,
            reply: kind == KIND_HELLO_REPLY,
            term,
            peer_seq,
            reserved,
            peer_reserved,
            floor,
            last_index,
            group,
            voters,
            conf_index,
            directory,
        })
    }

    fn snapshot_chunk(&mut self) -> Result<SnapshotChunk, DecodeError> {
        let transfer = self.varint()?;
        let index = self.varint()?;
        let term = self.varint()?;
        let total_len = self.varint()?;
        let checksum = u32::from_le_bytes(
            self.slice(4)?
                .try_into()
                .map_err(|_| DecodeError::UnexpectedEnd { offset: self.pos })?,
        );
        let offset = self.varint()?;
        // Bounded by the frame (checked against `frame_bytes_max` above).
        let data = self.bytes_within(None)?;
        Ok(SnapshotChunk {
            transfer,
            index,
            term,
            total_len,
            checksum,
            offset,
            data,
        })
    }

    fn frame(mut self) -> Result<PeerMessage, DecodeError> {
        let version = self.byte()?;
        if version != WIRE_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                got: version,
                supported: WIRE_VERSION,
            });
        }
        if self.buf.len() > self.limits.frame_bytes_max {
            return Err(DecodeError::LimitExceeded {
                limit: Limit::FrameBytes,
                len: self.buf.len() as u64,
                max: self.limits.frame_bytes_max,
                offset: 0,
            });
        }
        let kind_offset = self.pos;
        let msg = match self.byte()? {
            KIND_OPS => PeerMessage::Gossip(GossipMessage::Ops(self.ops()?)),
            KIND_DIGEST => PeerMessage::Gossip(GossipMessage::Digest {
                delivered: self.digest()?,
            }),
            KIND_PULL => PeerMessage::Gossip(GossipMessage::Pull { ids: self.ids()? }),
            KIND_RAFT => PeerMessage::Cab(CabMessage::Raft(self.bytes(Limit::RaftBytes)?)),
            KIND_FORWARD => PeerMessage::Cab(CabMessage::Forward { ids: self.ids()? }),
            KIND_COMPACT => PeerMessage::Cab(CabMessage::Compact {
                through: self.varint()?,
            }),
            kind @ (KIND_PROBE | KIND_PROBE_ECHO) => PeerMessage::Probe(Probe {
                stamp_us: self.varint()?,
                rtt_us: self.varint()?,
                echo: kind == KIND_PROBE_ECHO,
            }),
            kind @ (KIND_HELLO | KIND_HELLO_REPLY) => PeerMessage::Hello(self.hello(kind)?),
            KIND_SNAPSHOT_FETCH => PeerMessage::Snapshot(SnapshotMessage::Fetch {
                transfer: self.varint()?,
                min_index: self.varint()?,
                offset: self.varint()?,
            }),
            KIND_SNAPSHOT_CHUNK => {
                PeerMessage::Snapshot(SnapshotMessage::Chunk(self.snapshot_chunk()?))
            }
            KIND_SNAPSHOT_REFUSED => {
                let transfer = self.varint()?;
                let offset = self.pos;
                let retry = match self.byte()? {
                    0 => false,
                    1 => true,
                    value => return Err(DecodeError::NotABool { value, offset }),
                };
                PeerMessage::Snapshot(SnapshotMessage::Refused { transfer, retry })
            }
            tag => {
                return Err(DecodeError::UnknownKind {
                    tag,
                    offset: kind_offset,
                })
            }
        };
        let count = self.remaining();
        if count > 0 {
            return Err(DecodeError::TrailingBytes {
                count,
                offset: self.pos,
            });
        }
        Ok(msg)
    }

    fn ids(&mut self) -> Result<Vec<OpId>, DecodeError> {
        let n = self.length(Some(Limit::IdsPerMessage), ID_BYTES_MIN)?;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(self.id()?);
        }
        Ok(ids)
    }

    fn digest(&mut self) -> Result<Vec<(ReplicaId, u64)>, DecodeError> {
        let n = self.length(Some(Limit::IdsPerMessage), ID_BYTES_MIN)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let origin = self.replica()?;
            entries.push((origin, self.varint()?));
        }
        Ok(entries)
    }

    fn ops(&mut self) -> Result<Vec<Arc<Op>>, DecodeError> {
        let n = self.length(Some(Limit::OpsPerMessage), OP_BYTES_MIN)?;
        let mut ops = Vec::with_capacity(n);
        for _ in 0..n {
            ops.push(Arc::new(self.op()?));
        }
        Ok(ops)
    }

    fn op(&mut self) -> Result<Op, DecodeError> {
        let id = self.id()?;
        let timestamp = Timestamp(self.u64le()?);
        let flags_offset = self.pos;
        let flags = self.byte()?;
        if flags & !FLAGS_KNOWN != 0 {
            return Err(DecodeError::UnknownFlags {
                flags,
                offset: flags_offset,
            });
        }
        let strong = flags & FLAG_STRONG != 0;
        if strong != (flags & FLAG_CONTEXT != 0) {
            return Err(DecodeError::StrongContextMismatch {
                strong,
                offset: flags_offset,
            });
        }
        let name = self.name()?;
        let args = self.bytes(Limit::ArgsBytes)?;
        let request_id = if flags & FLAG_REQUEST_ID != 0 {
            let client = self.u64le()?;
            let seq = self.varint()?;
            Some(ClientRequestId { client, seq })
        } else {
            None
        };
        let acked = if flags & FLAG_ACKED != 0 {
            let n = self.length(None, 1)?;
            (0..n)
                .map(|_| self.varint())
                .collect::<Result<Vec<u64>, _>>()?
        } else {
            Vec::new()
        };
        let user = if flags & FLAG_USER != 0 {
            Some(self.name()?)
        } else {
            None
        };
        let causal_context = if strong { Some(self.dvv()?) } else { None };
        Ok(Op {
            id,
            timestamp,
            call: ProcCall {
                name,
                args,
                request_id,
                acked,
                time_us: timestamp.physical_us(),
                strong,
                op: Some((u64::from(id.origin.0), id.seq)),
                user,
            },
            strong,
            causal_context,
        })
    }

    /// A procedure's or a user's name: `len` (≤ `proc_name_bytes_max`),
    /// then UTF-8.
    fn name(&mut self) -> Result<Arc<str>, DecodeError> {
        let len = self.length(Some(Limit::ProcNameBytes), 1)?;
        let offset = self.pos;
        std::str::from_utf8(self.slice(len)?)
            .map_err(|_| DecodeError::InvalidUtf8 { offset })
            .map(Arc::<str>::from)
    }

    fn dvv(&mut self) -> Result<Dvv, DecodeError> {
        // Records are bounded by the frame only (each takes 3 bytes or more);
        // duplicated origins are merged by `from_records`.
        let n = self.length(None, RECORD_BYTES_MIN)?;
        let mut records = Vec::with_capacity(n);
        let mut exceptions_total: usize = 0;
        for _ in 0..n {
            let origin = self.replica()?;
            let counter = self.varint()?;
            let count_offset = self.pos;
            let count = self.length(Some(Limit::DvvExceptions), 1)?;
            exceptions_total = exceptions_total.saturating_add(count);
            let max = self.limits.dvv_exceptions_max;
            if exceptions_total > max {
                return Err(DecodeError::LimitExceeded {
                    limit: Limit::DvvExceptions,
                    len: exceptions_total as u64,
                    max,
                    offset: count_offset,
                });
            }
            let mut runs = RunsFromGaps::new(counter);
            for _ in 0..count {
                let offset = self.pos;
                let gap = self.varint()?;
                runs.push(gap).ok_or(DecodeError::SeqOverflow { offset })?;
            }
            records.push((origin, counter, runs.finish()));
        }
        Ok(Dvv::from_runs(records))
    }
}
