//! Properties of the frame codec: round trips, exact lengths, robustness
//! against arbitrary and corrupted input, limits and versioning.

use creek_types::DecodeError as F;
use std::sync::Arc;

use bytes::Bytes;
use creek_core::{Addrs, Directory, Dvv, Op, OpId, ReplicaId, Timestamp};
use creek_types::ClientRequestId;
use creek_types::ProcCall;
use creek_wire::{
    decode, decode_bytes, decode_op, encode, encode_op, encoded_len, frame_kind, CabMessage,
    DecodeError, EncodeError, GossipMessage, Hello, Limit, Limits, LimitsError, MemberState,
    PeerMessage, Probe, SnapshotChunk, SnapshotMessage, WIRE_VERSION,
};
use proptest::prelude::*;
use proptest::sample::Index;

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

fn arb_directory() -> impl Strategy<Value = Directory> {
    (
        any::<u16>(),
        prop::collection::btree_map(arb_origin(), ("[a-z0-9.:]{0,12}", "[a-z0-9.:]{0,12}"), 0..3),
    )
        .prop_map(|(max_id, addrs)| Directory {
            max_id,
            addrs: addrs
                .into_iter()
                .map(|(r, (peer, client))| (r, Addrs { peer, client }))
                .collect(),
        })
}

fn arb_origin() -> impl Strategy<Value = ReplicaId> {
    prop_oneof![3 => 0u16..5, 1 => any::<u16>()].prop_map(ReplicaId)
}

/// Any seq (including u64 boundaries), small ones favoured.
fn arb_seq() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1u64..300,
        1 => 1u64..=u64::MAX,
        1 => Just(u64::MAX),
        1 => (1u64..=127).prop_map(|k| 1u64 << (k % 64)),
    ]
}

fn arb_id() -> impl Strategy<Value = OpId> {
    (arb_origin(), arb_seq()).prop_map(|(o, s)| OpId::new(o, s))
}

/// Arbitrary (possibly non-normalized) records, normalized by `from_records`.
fn arb_dvv() -> impl Strategy<Value = Dvv> {
    let seq = prop_oneof![4 => 0u64..60, 1 => any::<u64>(), 1 => Just(u64::MAX)];
    let record = (
        prop_oneof![0u16..4, any::<u16>()].prop_map(ReplicaId),
        prop_oneof![4 => 0u64..30, 1 => any::<u64>()],
        prop::collection::vec(seq, 0..6),
    );
    prop::collection::vec(record, 0..5).prop_map(Dvv::from_records)
}

fn arb_call() -> impl Strategy<Value = ProcCall> {
    (
        prop::collection::vec(any::<char>(), 0..10),
        prop::collection::vec(any::<u8>(), 0..48),
        prop::option::of((
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(any::<u64>(), 0..4),
        )),
        prop::option::of("[a-z_][a-z0-9_]{0,12}"),
    )
        .prop_map(|(name, args, rid, user)| ProcCall {
            name: Arc::from(name.into_iter().collect::<String>()),
            args: Bytes::from(args),
            request_id: rid
                .as_ref()
                .map(|&(client, seq, _)| ClientRequestId { client, seq }),
            acked: rid.map(|(_, _, acked)| acked).unwrap_or_default(),
            time_us: 0,
            strong: false,
            op: None,
            user: user.map(Arc::from),
        })
}

fn arb_op() -> impl Strategy<Value = Op> {
    (
        arb_id(),
        any::<u64>(),
        arb_call(),
        prop::option::of(arb_dvv()),
    )
        .prop_map(|(id, ts, mut call, ctx)| Op {
            id,
            timestamp: Timestamp(ts),
            call: {
                // Not on the wire: the decoder derives them from the
                // timestamp, the flags and the id.
                call.time_us = Timestamp(ts).physical_us();
                call.strong = ctx.is_some();
                call.op = Some((u64::from(id.origin.0), id.seq));
                call
            },
            strong: ctx.is_some(),
            causal_context: ctx,
        })
}

fn arb_msg() -> impl Strategy<Value = PeerMessage> {
    prop_oneof![
        3 => prop::collection::vec(arb_op().prop_map(Arc::new), 0..5)
            .prop_map(|ops| PeerMessage::Gossip(GossipMessage::Ops(ops))),
        1 => prop::collection::vec((arb_origin(), prop_oneof![0u64..100, any::<u64>()]), 0..8)
            .prop_map(|delivered| PeerMessage::Gossip(GossipMessage::Digest { delivered })),
        1 => prop::collection::vec(arb_id(), 0..8)
            .prop_map(|ids| PeerMessage::Gossip(GossipMessage::Pull { ids })),
        1 => prop::collection::vec(any::<u8>(), 0..200)
            .prop_map(|b| PeerMessage::Cab(CabMessage::Raft(Bytes::from(b)))),
        1 => prop::collection::vec(arb_id(), 0..8)
            .prop_map(|ids| PeerMessage::Cab(CabMessage::Forward { ids })),
        1 => any::<u64>().prop_map(|through| PeerMessage::Cab(CabMessage::Compact { through })),
        1 => (any::<u64>(), any::<bool>(), any::<u64>())
            .prop_map(|(stamp_us, echo, rtt_us)| PeerMessage::Probe(Probe { stamp_us, echo, rtt_us })),
        1 => (any::<u64>(), any::<u64>())
            .prop_map(|(applied_us, global_us)| PeerMessage::Stable(creek_wire::Stable { applied_us, global_us })),
        1 => (
            any::<u64>(),
            prop_oneof![Just(MemberState::Joining), Just(MemberState::Member), Just(MemberState::Lost)],
            prop::collection::vec((arb_origin(), any::<u64>()), 0..6),
            any::<bool>(),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
            (prop::collection::vec(arb_origin(), 0..6), prop::collection::vec(arb_origin(), 0..6), any::<u64>(), arb_directory()),
        )
            .prop_map(|(nonce, state, founders, reply, (term, peer_seq, reserved, peer_reserved, floor, last_index), (group, voters, conf_index, directory))| {
                PeerMessage::Hello(Hello {
                    nonce,
                    state,
                    founders,
                    reply,
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
            }),
        1 => (any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(transfer, min_index, offset)| {
                PeerMessage::Snapshot(SnapshotMessage::Fetch { transfer, min_index, offset })
            }),
        1 => (any::<[u64; 5]>(), any::<u32>(), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|([transfer, index, term, total_len, offset], checksum, data)| {
                PeerMessage::Snapshot(SnapshotMessage::Chunk(SnapshotChunk {
                    transfer,
                    index,
                    term,
                    total_len,
                    checksum,
                    offset,
                    data: Bytes::from(data),
                }))
            }),
        1 => (any::<u64>(), any::<bool>())
            .prop_map(|(transfer, retry)| PeerMessage::Snapshot(SnapshotMessage::Refused { transfer, retry })),
    ]
}

#[derive(Clone, Debug)]
enum Mutation {
    Truncate(Index),
    FlipBit(Index, u8),
    Insert(Index, u8),
    Overwrite(Index, u8),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>()).prop_map(Mutation::Truncate),
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Overwrite(i, b)),
    ]
}

fn apply(b: &mut Vec<u8>, m: &Mutation) {
    match *m {
        Mutation::Truncate(i) => b.truncate(i.index(b.len() + 1)),
        Mutation::FlipBit(i, bit) if !b.is_empty() => {
            let i = i.index(b.len());
            b[i] ^= 1 << bit;
        }
        Mutation::Insert(i, byte) => b.insert(i.index(b.len() + 1), byte),
        Mutation::Overwrite(i, byte) if !b.is_empty() => {
            let i = i.index(b.len());
            b[i] = byte;
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn limits() -> Limits {
    Limits::default()
}

fn enc(msg: &PeerMessage) -> Bytes {
    encode(msg, &limits()).expect("message within the default limits")
}

/// Decoding `frame` never panics; the copying and zero-copy decoders agree;
/// and a decoded message re-encodes to a frame that decodes to it again.
fn check_consistent(frame: &[u8]) -> Result<(), TestCaseError> {
    let copied = decode(frame, &limits());
    let shared = decode_bytes(&Bytes::copy_from_slice(frame), &limits());
    prop_assert_eq!(&copied, &shared);
    if let Ok(msg) = copied {
        let again = encode(&msg, &limits());
        prop_assert!(again.is_ok(), "decoded message refused: {:?}", again);
        let again = again.unwrap_or_default();
        prop_assert_eq!(again.len(), encoded_len(&msg));
        // Decoding normalizes, so re-encoding never grows a frame (and is
        // never refused for its size).
        prop_assert!(again.len() <= frame.len());
        prop_assert_eq!(decode(&again, &limits()), Ok(msg));
    }
    Ok(())
}

/// How much of `limit` the message uses.
fn usage(msg: &PeerMessage, limit: Limit) -> usize {
    let ops: &[Arc<Op>] = match msg {
        PeerMessage::Gossip(GossipMessage::Ops(ops)) => ops,
        _ => &[],
    };
    let max_of = |f: &dyn Fn(&Op) -> usize| ops.iter().map(|op| f(op)).max().unwrap_or(0);
    match (limit, msg) {
        (Limit::FrameBytes, _) => encoded_len(msg),
        (Limit::OpsPerMessage, _) => ops.len(),
        (Limit::IdsPerMessage, PeerMessage::Gossip(GossipMessage::Digest { delivered })) => {
            delivered.len()
        }
        (
            Limit::IdsPerMessage,
            PeerMessage::Gossip(GossipMessage::Pull { ids })
            | PeerMessage::Cab(CabMessage::Forward { ids }),
        ) => ids.len(),
        (Limit::IdsPerMessage, PeerMessage::Hello(h)) => {
            h.founders.len().max(h.group.len()).max(h.voters.len())
        }
        (Limit::ProcNameBytes, _) => max_of(&|op| {
            let user = op.call.user.as_deref().map_or(0, str::len);
            op.call.name.len().max(user)
        }),
        (Limit::ArgsBytes, _) => max_of(&|op| op.call.args.len()),
        (Limit::DvvExceptions, _) => {
            max_of(&|op| op.causal_context.as_ref().map_or(0, Dvv::exceptions))
        }
        (Limit::RaftBytes, PeerMessage::Cab(CabMessage::Raft(b))) => b.len(),
        _ => 0,
    }
}

fn with(limit: Limit, value: usize) -> Limits {
    let mut l = Limits::default();
    match limit {
        Limit::FrameBytes => l.frame_bytes_max = value,
        Limit::OpsPerMessage => l.ops_per_message_max = value,
        Limit::IdsPerMessage => l.ids_per_message_max = value,
        Limit::ProcNameBytes => l.proc_name_bytes_max = value,
        Limit::ArgsBytes => l.args_bytes_max = value,
        Limit::DvvExceptions => l.dvv_exceptions_max = value,
        Limit::RaftBytes => l.raft_bytes_max = value,
        _ => unreachable!("unknown limit"),
    }
    l
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn round_trip(msg in arb_msg()) {
        let frame = enc(&msg);
        prop_assert_eq!(frame.len(), encoded_len(&msg));
        prop_assert_eq!(frame.first(), Some(&WIRE_VERSION));
        prop_assert_eq!(decode(&frame, &limits()), Ok(msg.clone()));
        let shared = decode_bytes(&frame, &limits());
        // The frame's kind names its message without decoding it.
        let kind = match &msg {
            PeerMessage::Gossip(GossipMessage::Ops(_)) => "ops",
            PeerMessage::Gossip(GossipMessage::Digest { .. }) => "digest",
            PeerMessage::Gossip(GossipMessage::Pull { .. }) => "pull",
            PeerMessage::Cab(CabMessage::Raft(_)) => "raft",
            PeerMessage::Cab(CabMessage::Forward { .. }) => "forward",
            PeerMessage::Cab(CabMessage::Compact { .. }) => "compact",
            PeerMessage::Probe(_) => "probe",
            PeerMessage::Stable(_) => "stable",
            PeerMessage::Hello(_) => "hello",
            PeerMessage::Snapshot(_) => "snapshot",
        };
        prop_assert_eq!(frame_kind(&frame), kind);
        prop_assert_eq!(&shared, &Ok(msg));
        // Byte strings decoded from a `Bytes` frame point into it.
        let range = frame.as_ptr_range();
        let inside = |b: &Bytes| b.is_empty() || range.contains(&b.as_ptr());
        match shared {
            Ok(PeerMessage::Gossip(GossipMessage::Ops(ops))) => {
                prop_assert!(ops.iter().all(|op| inside(&op.call.args)));
            }
            Ok(PeerMessage::Cab(CabMessage::Raft(b))) => prop_assert!(inside(&b)),
            _ => {}
        }
    }

    /// A lone op (as `creek-store` keeps payloads) is the op of a one-op
    /// `Ops` frame, round-trips, and any prefix or extension is refused.
    #[test]
    fn lone_op_round_trip(op in arb_op(), junk in any::<u8>()) {
        let bytes = encode_op(&op);
        let frame = enc(&PeerMessage::Gossip(GossipMessage::Ops(vec![Arc::new(op.clone())])));
        prop_assert_eq!(&frame[3..], &bytes[..]);
        prop_assert_eq!(decode_op(&bytes, &limits()), Ok(op));
        for n in 0..bytes.len() {
            prop_assert!(decode_op(&bytes.slice(..n), &limits()).is_err());
        }
        let mut longer = bytes.to_vec();
        longer.push(junk);
        let is_trailing = matches!(
            decode_op(&Bytes::from(longer), &limits()),
            Err(DecodeError::Format(F::TrailingBytes { count: 1, .. }))
        );
        prop_assert!(is_trailing);
    }

    #[test]
    fn strict_prefixes_are_rejected(msg in arb_msg()) {
        let frame = enc(&msg);
        for n in 0..frame.len() {
            prop_assert!(decode(&frame[..n], &limits()).is_err(), "prefix of {} bytes", n);
        }
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(
        b in prop::collection::vec(any::<u8>(), 0..400),
        kind in prop::sample::select(vec![0x01u8, 0x02, 0x03, 0x11, 0x12, 0x13, 0x21, 0x23]),
    ) {
        check_consistent(&b)?;
        // The same bytes behind a valid header reach the body decoders.
        let mut framed = vec![WIRE_VERSION, kind];
        framed.extend_from_slice(&b);
        check_consistent(&framed)?;
    }

    #[test]
    fn decoding_corrupted_encodings_never_panics(
        msg in arb_msg(),
        mutations in prop::collection::vec(arb_mutation(), 1..4),
    ) {
        let mut b = enc(&msg).to_vec();
        for m in &mutations {
            apply(&mut b, m);
            check_consistent(&b)?;
        }
    }

    #[test]
    fn every_limit_is_enforced_both_ways(msg in arb_msg()) {
        let frame = enc(&msg);
        for limit in Limit::ALL {
            let used = usage(&msg, limit);
            // At the limit: accepted.
            let exact = with(limit, used);
            prop_assert_eq!(encode(&msg, &exact), Ok(frame.clone()));
            prop_assert_eq!(decode(&frame, &exact), Ok(msg.clone()));
            if used == 0 {
                continue;
            }
            // One below: refused by the encoder, rejected by the decoder.
            let tight = with(limit, used - 1);
            match encode(&msg, &tight) {
                Err(EncodeError::LimitExceeded { limit: l, len, max }) => {
                    prop_assert_eq!(l, limit);
                    prop_assert_eq!(max, used - 1);
                    prop_assert!(len > max as u64);
                }
                other => prop_assert!(false, "{}: encode gave {:?}", limit, other),
            }
            match decode(&frame, &tight) {
                Err(DecodeError::LimitExceeded { limit: l, len, max, .. }) => {
                    prop_assert_eq!(l, limit);
                    prop_assert_eq!(max, used - 1);
                    prop_assert!(len > max as u64);
                }
                other => prop_assert!(false, "{}: decode gave {:?}", limit, other),
            }
        }
    }

    #[test]
    fn other_versions_are_rejected(msg in arb_msg(), version in any::<u8>()) {
        prop_assume!(version != WIRE_VERSION);
        let mut b = enc(&msg).to_vec();
        b[0] = version;
        let want = Err(DecodeError::UnsupportedVersion { got: version, supported: WIRE_VERSION });
        prop_assert_eq!(decode(&b, &limits()), want.clone());
        // Checked before anything else, even the frame size.
        prop_assert_eq!(decode(&b, &with(Limit::FrameBytes, 1)), want);
    }
}

// ---------------------------------------------------------------------------
// Examples
// ---------------------------------------------------------------------------

fn op_example() -> Op {
    Op {
        id: OpId::new(ReplicaId(1), 5),
        timestamp: Timestamp(0x0102_0304_0506_0708),
        call: ProcCall {
            name: Arc::from("inc"),
            args: Bytes::from_static(&[0xaa]),
            request_id: Some(ClientRequestId { client: 7, seq: 2 }),
            acked: Vec::new(),
            time_us: Timestamp(0x0102_0304_0506_0708).physical_us(),
            strong: true,
            op: Some((1, 5)),
            user: None,
        },
        strong: true,
        causal_context: Some(
            [1, 2, 3, 6]
                .into_iter()
                .map(|s| OpId::new(ReplicaId(1), s))
                .collect(),
        ),
    }
}

/// Test vectors, as in the module docs.
#[test]
fn golden_frames() {
    let fwd = PeerMessage::Cab(CabMessage::Forward {
        ids: vec![OpId::new(ReplicaId(3), 17)],
    });
    assert_eq!(&enc(&fwd)[..], &[0x02, 0x12, 0x01, 0x03, 0x11]);

    let echo = PeerMessage::Probe(Probe {
        stamp_us: 300,
        echo: true,
        rtt_us: 0,
    });
    assert_eq!(&enc(&echo)[..], &[0x02, 0x22, 0xac, 0x02, 0x00]);

    let ops = PeerMessage::Gossip(GossipMessage::Ops(vec![Arc::new(op_example())]));
    #[rustfmt::skip]
    let want: &[u8] = &[
        0x02, 0x01,                                     // version, kind Ops
        0x01,                                           // 1 op
        0x01, 0x05,                                     // id r1.5
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // timestamp u64le
        0x07,                                           // strong | context | request id
        0x03, b'i', b'n', b'c',                         // name
        0x01, 0xaa,                                     // args
        0x07, 0, 0, 0, 0, 0, 0, 0, 0x02,                // request id: client u64le, seq
        0x01,                                           // 1 record
        0x01, 0x03, 0x01, 0x02,                         // r1: 1..=3, 1 exception: 3 + 2 + 1 = 6
    ];
    assert_eq!(&enc(&ops)[..], want);
    assert_eq!(encoded_len(&ops), want.len());

    let digest = PeerMessage::Gossip(GossipMessage::Digest {
        delivered: vec![(ReplicaId(0), 0), (ReplicaId(300), 128)],
    });
    assert_eq!(
        &enc(&digest)[..],
        &[0x02, 0x02, 0x02, 0x00, 0x00, 0xac, 0x02, 0x80, 0x01]
    );
    let raft = PeerMessage::Cab(CabMessage::Raft(Bytes::from_static(b"xy")));
    assert_eq!(&enc(&raft)[..], &[0x02, 0x11, 0x02, b'x', b'y']);
    let pull = PeerMessage::Gossip(GossipMessage::Pull { ids: vec![] });
    assert_eq!(&enc(&pull)[..], &[0x02, 0x03, 0x00]);
}

fn err(frame: &[u8]) -> DecodeError {
    match decode(frame, &limits()) {
        Err(e) => e,
        Ok(m) => panic!("decoded {m:?}"),
    }
}

/// The op example's frame with its flags byte (at offset 13) replaced.
fn op_frame_with_flags(flags: u8) -> Vec<u8> {
    let ops = PeerMessage::Gossip(GossipMessage::Ops(vec![Arc::new(op_example())]));
    let mut b = enc(&ops).to_vec();
    assert_eq!(b[13], 0x07);
    b[13] = flags;
    b
}

#[test]
fn malformed_frames_are_rejected_with_clear_errors() {
    let cases: Vec<(&[u8], DecodeError, &str)> = vec![
        (
            &[],
            DecodeError::Format(F::UnexpectedEnd { offset: 0 }),
            "input ends unexpectedly at byte 0",
        ),
        (
            &[1, 1, 0],
            DecodeError::UnsupportedVersion {
                got: 1,
                supported: 2,
            },
            "unsupported wire version 1 (this node speaks version 2)",
        ),
        (
            &[2],
            DecodeError::Format(F::UnexpectedEnd { offset: 1 }),
            "input ends unexpectedly at byte 1",
        ),
        (
            &[2, 0x7f],
            DecodeError::UnknownKind {
                tag: 0x7f,
                offset: 1,
            },
            "unknown message kind 0x7f at byte 1",
        ),
        (
            &[2, 0x12, 1, 3, 0],
            DecodeError::ZeroSeq { offset: 4 },
            "seq 0 at byte 4 is not a valid seq",
        ),
        (
            &[2, 0x12, 1, 0x80, 0x80, 0x04, 1],
            DecodeError::ReplicaIdOutOfRange {
                value: 65536,
                offset: 3,
            },
            "replica id 65536 at byte 3 does not fit in 16 bits",
        ),
        (
            &[2, 0x12, 0x81, 0x00],
            DecodeError::Format(F::NonCanonicalVarint { offset: 2 }),
            "varint at byte 2 is not in its shortest form",
        ),
        (
            &[
                2, 0x02, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
            ],
            DecodeError::Format(F::VarintOverflow { offset: 4 }),
            "varint at byte 4 overflows 64 bits",
        ),
        (
            &[2, 0x12, 3, 1, 1],
            DecodeError::Format(F::LengthTooLarge {
                len: 3,
                offset: 2,
                remaining: 2,
            }),
            "declared length 3 at byte 2 exceeds what the 2 remaining bytes can hold",
        ),
        (
            &[2, 0x11, 1, 9, 9],
            DecodeError::Format(F::TrailingBytes {
                count: 1,
                offset: 4,
            }),
            "1 trailing bytes from byte 4",
        ),
        (
            // ids_per_message_max is checked before the remaining input:
            // a huge declared count allocates nothing.
            &[2, 0x12, 0xff, 0xff, 0xff, 0xff, 0x0f],
            DecodeError::LimitExceeded {
                limit: Limit::IdsPerMessage,
                len: u64::from(u32::MAX),
                max: 1_000_000,
                offset: 2,
            },
            "4294967295 at byte 2 exceeds ids_per_message_max = 1000000",
        ),
    ];
    for (frame, want, text) in cases {
        let got = err(frame);
        assert_eq!(got, want, "frame {frame:02x?}");
        assert_eq!(got.to_string(), text);
    }
}

#[test]
fn malformed_ops_are_rejected() {
    // Flags: strong without context, context without strong, unknown bits.
    assert_eq!(
        err(&op_frame_with_flags(0x05)),
        DecodeError::StrongContextMismatch {
            strong: true,
            offset: 13
        }
    );
    assert_eq!(
        err(&op_frame_with_flags(0x06)).to_string(),
        "op flags at byte 13: a weak op must not carry a causal context"
    );
    assert_eq!(
        err(&op_frame_with_flags(0x27)),
        DecodeError::UnknownFlags {
            flags: 0x27,
            offset: 13
        }
    );
    // A weak op whose (absent) context bytes are then trailing.
    assert!(matches!(
        err(&op_frame_with_flags(0x04)),
        DecodeError::Format(F::TrailingBytes { .. })
    ));

    // Invalid UTF-8 in the name (offset 15 is the name's first byte).
    let mut b = op_frame_with_flags(0x07);
    b[15] = 0xff;
    assert_eq!(err(&b), DecodeError::InvalidUtf8 { offset: 15 });

    // An exception gap that overflows u64: counter u64::MAX, gap 0.
    let mut b = op_frame_with_flags(0x07);
    b.truncate(b.len() - 4);
    b.extend_from_slice(&[0x01]); // origin r1
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    b.extend_from_slice(&[0x01, 0x00]); // 1 exception, gap 0
    let at = b.len() - 1;
    assert_eq!(err(&b), DecodeError::SeqOverflow { offset: at });

    // The op id's seq may not be 0.
    let mut b = op_frame_with_flags(0x07);
    b[4] = 0;
    assert_eq!(err(&b), DecodeError::ZeroSeq { offset: 4 });
}

#[test]
fn non_normalized_contexts_are_normalized() {
    let mut b = op_frame_with_flags(0x07);
    b.truncate(b.len() - 5);
    #[rustfmt::skip]
    b.extend_from_slice(&[
        0x04,                   // 4 records
        0x02, 0x00, 0x00,       // r2: empty
        0x01, 0x01, 0x01, 0x00, // r1: 1, exception 1 + 0 + 1 = 2 (continues the counter)
        0x00, 0x00, 0x01, 0x04, // r0: exception 5
        0x01, 0x03, 0x01, 0x02, // r1 again: 1..=3, exception 6
    ]);
    let Ok(PeerMessage::Gossip(GossipMessage::Ops(ops))) = decode(&b, &limits()) else {
        panic!("frame rejected")
    };
    let want: Dvv = [(1, 1), (1, 2), (1, 3), (1, 6), (0, 5)]
        .into_iter()
        .map(|(o, s)| OpId::new(ReplicaId(o), s))
        .collect();
    assert_eq!(ops[0].causal_context.as_ref(), Some(&want));
    check_consistent(&b).expect("re-encodes consistently");
}

#[test]
fn encode_refuses_malformed_messages() {
    let mut op = op_example();
    op.causal_context = None;
    let msg = PeerMessage::Gossip(GossipMessage::Ops(vec![Arc::new(op.clone())]));
    let e = encode(&msg, &limits());
    assert_eq!(
        e,
        Err(EncodeError::StrongContextMismatch {
            id: op.id,
            strong: true
        })
    );
    assert_eq!(
        e.map_err(|e| e.to_string()),
        Err("op r1.5: a strong op must carry a causal context".to_owned())
    );

    op.strong = false;
    op.id.seq = 0;
    let msg = PeerMessage::Gossip(GossipMessage::Ops(vec![Arc::new(op)]));
    assert_eq!(
        encode(&msg, &limits()),
        Err(EncodeError::ZeroSeq {
            origin: ReplicaId(1)
        })
    );
    let msg = PeerMessage::Cab(CabMessage::Forward {
        ids: vec![OpId::new(ReplicaId(4), 0)],
    });
    assert_eq!(
        encode(&msg, &limits()),
        Err(EncodeError::ZeroSeq {
            origin: ReplicaId(4)
        })
    );
    // encoded_len is defined even for messages encode refuses.
    assert_eq!(encoded_len(&msg), 5);
}

#[test]
fn default_limits_hold_large_messages() {
    // A message at the default ops limit encodes and decodes; one more op
    // is refused.
    let op = Arc::new(Op::new(
        OpId::new(ReplicaId(1), 1),
        Timestamp(1),
        ProcCall::new("p", Bytes::new()),
        false,
        None,
    ));
    let mut ops = vec![op; Limits::default().ops_per_message_max];
    let msg = PeerMessage::Gossip(GossipMessage::Ops(ops.clone()));
    let frame = enc(&msg);
    assert_eq!(decode_bytes(&frame, &limits()), Ok(msg));
    ops.push(ops[0].clone());
    let msg = PeerMessage::Gossip(GossipMessage::Ops(ops));
    assert!(matches!(
        encode(&msg, &limits()),
        Err(EncodeError::LimitExceeded {
            limit: Limit::OpsPerMessage,
            len: 65_537,
            max: 65_536
        })
    ));
}

#[test]
fn limits_validate() {
    let d = Limits::default();
    assert_eq!(d.validate(), Ok(()));
    assert_eq!(d.frame_bytes_max, 16 << 20);
    assert_eq!(d.ops_per_message_max, 65_536);
    assert_eq!(d.ids_per_message_max, 1_000_000);
    assert_eq!(d.proc_name_bytes_max, 256);
    assert_eq!(d.args_bytes_max, 4 << 20);
    assert_eq!(d.dvv_exceptions_max, 1_000_000);
    assert_eq!(d.raft_bytes_max, 16 << 20);
    for limit in Limit::ALL {
        assert_eq!(
            with(limit, 0).validate(),
            Err(LimitsError::Zero { limit }),
            "{limit}"
        );
    }
    let l = with(Limit::RaftBytes, d.frame_bytes_max + 1);
    assert_eq!(
        l.validate().map_err(|e| e.to_string()),
        Err("raft_bytes_max = 16777217 exceeds frame_bytes_max = 16777216".to_owned())
    );
}

/// Every count or length is checked against the remaining input before
/// anything is reserved for it: a short frame declaring a large count
/// (within the limits) is rejected with `LengthTooLarge` at that count.
#[test]
fn declared_counts_are_checked_against_the_remaining_input() {
    // 60_000 (below every count limit but the name's) as a varint.
    const BIG: [u8; 3] = [0xe0, 0xd4, 0x03];
    let big = |prefix: &[u8], suffix: &[u8]| {
        let mut b = prefix.to_vec();
        b.extend_from_slice(&BIG);
        b.extend_from_slice(suffix);
        (b, prefix.len())
    };
    let op_head: &[u8] = &[2, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    let with_op = |rest: &[u8]| [op_head, rest].concat();
    let cases = [
        big(&[2, 0x01], &[0; 20]),                             // ops
        big(&[2, 0x02], &[0; 20]),                             // digest entries
        big(&[2, 0x03], &[0; 20]),                             // pull ids
        big(&[2, 0x12], &[0; 20]),                             // forward ids
        big(&[2, 0x11], &[0; 20]),                             // raft payload
        big(&with_op(&[0x00, 0x00]), &[0; 20]),                // args
        big(&with_op(&[0x03, 0x00, 0x00]), &[0; 20]),          // context records
        big(&with_op(&[0x03, 0x00, 0x00, 1, 1, 1]), &[0; 20]), // exceptions
    ];
    for (frame, offset) in cases {
        match decode(&frame, &limits()) {
            Err(DecodeError::Format(F::LengthTooLarge {
                len: 60_000,
                offset: at,
                remaining,
            })) => {
                assert_eq!(at, offset, "frame {frame:02x?}");
                assert_eq!(remaining, frame.len() - offset - BIG.len());
            }
            other => panic!("frame {frame:02x?}: {other:?}"),
        }
    }
    // The name length is bounded by its limit first (256).
    let (frame, offset) = big(&with_op(&[0x00]), &[0; 20]);
    assert!(matches!(
        decode(&frame, &limits()),
        Err(DecodeError::LimitExceeded { limit: Limit::ProcNameBytes, offset: at, .. }) if at == offset
    ));
}
