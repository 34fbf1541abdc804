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
//! | 0x25 | [`Stable`]                | `applied_us`, `global_us`                      |
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
use creek_types::ClientRequestId;
use creek_types::ProcCall;

use crate::{
    CabMessage, GossipMessage, Hello, MemberState, PeerMessage, Probe, SnapshotChunk,
    SnapshotMessage, Stable,
};

/// Version of the frame format, the first byte of every frame.
pub const WIRE_VERSION: u8 = 2;

/// The name of the message kind an encoded frame holds, read from its
/// second byte without decoding it (for accounting: what a node loop spent
/// its time on); `"unknown"` for a frame too short or of no known kind.
pub fn frame_kind(frame: &[u8]) -> &'static str {
    match frame.get(1).copied() {
        Some(KIND_OPS) => "ops",
        Some(KIND_DIGEST) => "digest",
        Some(KIND_PULL) => "pull",
        Some(KIND_RAFT) => "raft",
        Some(KIND_FORWARD) => "forward",
        Some(KIND_COMPACT) => "compact",
        Some(KIND_PROBE | KIND_PROBE_ECHO) => "probe",
        Some(KIND_STABLE) => "stable",
        Some(KIND_HELLO | KIND_HELLO_REPLY) => "hello",
        Some(KIND_SNAPSHOT_FETCH | KIND_SNAPSHOT_CHUNK | KIND_SNAPSHOT_REFUSED) => "snapshot",
        _ => "unknown",
    }
}

const KIND_OPS: u8 = 0x01;
const KIND_DIGEST: u8 = 0x02;
const KIND_PULL: u8 = 0x03;
const KIND_RAFT: u8 = 0x11;
const KIND_FORWARD: u8 = 0x12;
const KIND_COMPACT: u8 = 0x13;
const KIND_PROBE: u8 = 0x21;
const KIND_PROBE_ECHO: u8 = 0x22;
const KIND_STABLE: u8 = 0x25;
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

/// Why a strong or weak op's causal context is refused.
fn mismatch(strong: bool) -> &'static str {
    if strong {
        "a strong op must carry a causal context"
    } else {
        "a weak op must not carry a causal context"
    }
}

mod decode;
mod dvv;
mod encode;
mod limits;

pub use decode::{decode, decode_bytes, decode_op, DecodeError};
pub(crate) use dvv::{exception_gaps, run_seqs, RunsFromGaps};
pub use encode::{encode, encode_op, encoded_len, EncodeError};
pub use limits::{Limit, Limits, LimitsError};
