//! Refused claims about this replica's own ops.
//!
//! An origin is the only source of its ops: peers never send a replica its
//! own ops, except when it takes them back after it lost its data or
//! crashed (a *loose range* of its own origin, see [`Gossip::open_range`]).
//! So outside that range, a message that carries an op of this replica's
//! origin it never issued, or a different op under a seq it issued, or a
//! digest claiming a peer holds its ops past the last one it issued, comes
//! from something that speaks the peer protocol as another replica. Gossip
//! refuses what such a message carries and reports each refusal upward
//! ([`GossipOutput::refused`]); deciding what to do about it (log, count,
//! keep its own seqs clear of the forged ones) is the caller's.
//!
//! Gossip compares with its own delivered counter, which may trail the
//! replica's event counter after an installed checkpoint: the caller
//! checks a report against the seq the replica last issued before acting.
//!
//! [`Gossip::open_range`]: crate::Gossip::open_range
//! [`GossipOutput::refused`]: crate::GossipOutput::refused

use creek_core::{OpId, ReplicaId};

/// Refusals kept in one [`GossipOutput`](crate::GossipOutput); more in the
/// same turn are only counted ([`GossipStats::own_origin_refused`]).
///
/// [`GossipStats::own_origin_refused`]: crate::GossipStats::own_origin_refused
pub const REFUSALS_KEPT_MAX: usize = 64;

/// What a refused message claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalKind {
    /// An op of this replica's origin with a seq past the last one it
    /// issued (outside a loose range of its own).
    NeverIssued,
    /// An op of this replica's origin under a seq it issued to a different
    /// op (the op it holds for that id differs).
    SeqReused,
    /// A digest claiming the sender holds this replica's ops up to the
    /// id's seq, past the last one it issued.
    ClaimsNeverIssued,
}

/// One refused claim about this replica's own ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The peer the message came from (as its connection claims).
    pub from: ReplicaId,
    /// The op id the message carried or claimed (this replica's origin).
    pub id: OpId,
    /// What it claimed.
    pub kind: RefusalKind,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (id, from) = (self.id, self.from);
        match self.kind {
            RefusalKind::NeverIssued => write!(
                f,
                "peer {from} sent op {id} of this replica's origin, which it never issued"
            ),
            RefusalKind::SeqReused => write!(
                f,
                "peer {from} sent op {id} of this replica's origin, which it issued to a \
                 different op"
            ),
            RefusalKind::ClaimsNeverIssued => write!(
                f,
                "peer {from} claims to hold this replica's ops up to {id}, past the last one \
                 it issued"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use creek_core::{Op, OpId, ReplicaId, Timestamp};
    use creek_types::ProcCall;
    use creek_wire::GossipMessage;

    use super::{Refusal, RefusalKind, REFUSALS_KEPT_MAX};
    use crate::testkit::op;
    use crate::{Gossip, GossipConfig};

    const ME: ReplicaId = ReplicaId(2);
    const PEER: ReplicaId = ReplicaId(1);

    fn gossip() -> Gossip {
        Gossip::new(GossipConfig::new(ME, [PEER, ReplicaId(3)])).expect("valid config")
    }

    /// An op of this replica's origin with `seq`, other than the one the
    /// test kit builds (another procedure call).
    fn forged(seq: u64) -> Arc<Op> {
        Arc::new(Op {
            id: OpId::new(ME, seq),
            timestamp: Timestamp::new(seq, 0),
            call: ProcCall::new("kv.put", b"injected".to_vec()),
            strong: false,
            causal_context: None,
        })
    }

    fn refusal(seq: u64, kind: RefusalKind) -> Refusal {
        Refusal {
            from: PEER,
            id: OpId::new(ME, seq),
            kind,
        }
    }

    /// An own op past the last one issued is neither delivered nor held,
    /// and is reported once with the peer that sent it.
    #[test]
    fn an_own_op_never_issued_is_refused_and_reported() {
        let mut g = gossip();
        g.broadcast(op(2, 1));
        let _ = g.take_output();
        g.on_message(PEER, GossipMessage::Ops(vec![forged(2)]));
        let out = g.take_output();
        assert!(out.delivered.is_empty());
        assert_eq!(out.refused, vec![refusal(2, RefusalKind::NeverIssued)]);
        assert!(!g.has_delivered(OpId::new(ME, 2)));
        assert_eq!(g.stats().own_origin_refused, 1);
        // The replica's next own op still takes seq 2.
        g.broadcast(op(2, 2));
        assert_eq!(g.op(OpId::new(ME, 2)), Some(&op(2, 2)));
    }

    /// A different op under a seq this replica issued is reported; a copy
    /// of the op it issued (a late answer to a pull) is only ignored.
    #[test]
    fn an_own_seq_given_to_another_op_is_reported_and_a_copy_is_not() {
        let mut g = gossip();
        g.broadcast(op(2, 1));
        let _ = g.take_output();
        g.on_message(PEER, GossipMessage::Ops(vec![op(2, 1)]));
        let out = g.take_output();
        assert!(out.refused.is_empty() && out.delivered.is_empty());
        g.on_message(PEER, GossipMessage::Ops(vec![forged(1)]));
        let out = g.take_output();
        assert_eq!(out.refused, vec![refusal(1, RefusalKind::SeqReused)]);
        assert_eq!(g.op(OpId::new(ME, 1)), Some(&op(2, 1)), "the own op stays");
    }

    /// A digest claiming this replica's ops past the last it issued is
    /// reported; one at or below is not.
    #[test]
    fn a_digest_claiming_own_ops_never_issued_is_reported() {
        let mut g = gossip();
        g.broadcast(op(2, 1));
        let _ = g.take_output();
        g.on_message(
            PEER,
            GossipMessage::Digest {
                delivered: vec![(ME, 1)],
            },
        );
        assert!(g.take_output().refused.is_empty());
        g.on_message(
            PEER,
            GossipMessage::Digest {
                delivered: vec![(ME, 27)],
            },
        );
        let out = g.take_output();
        assert_eq!(
            out.refused,
            vec![refusal(27, RefusalKind::ClaimsNeverIssued)]
        );
    }

    /// docs/protocol.md, "Cluster identity and lost disks": a rebuilt
    /// replica takes its own earlier ops back from its peers in any order
    /// (a loose range of its own origin); none of them is refused, and
    /// peers' digests up to the range's end are not either. Past the range
    /// the rule holds again.
    #[test]
    fn a_rebuilt_replica_takes_its_own_ops_back_unrefused() {
        let mut g = gossip();
        g.open_range(ME, 0, 5, |_| false);
        g.on_message(PEER, GossipMessage::Ops(vec![op(2, 3), op(2, 1), op(2, 5)]));
        g.on_message(
            PEER,
            GossipMessage::Digest {
                delivered: vec![(ME, 5)],
            },
        );
        let out = g.take_output();
        assert_eq!(out.delivered, vec![op(2, 3), op(2, 1), op(2, 5)]);
        assert!(out.refused.is_empty());
        g.on_message(PEER, GossipMessage::Ops(vec![forged(6)]));
        let out = g.take_output();
        assert_eq!(out.refused, vec![refusal(6, RefusalKind::NeverIssued)]);
    }

    /// Refusals kept for the caller are bounded; all are counted.
    #[test]
    fn refusals_kept_are_bounded_and_all_counted() {
        let mut g = gossip();
        let n = REFUSALS_KEPT_MAX as u64 + 10;
        g.on_message(PEER, GossipMessage::Ops((1..=n).map(forged).collect()));
        let out = g.take_output();
        assert_eq!(out.refused.len(), REFUSALS_KEPT_MAX);
        assert_eq!(g.stats().own_origin_refused, n);
        assert!(out.delivered.is_empty());
    }
}
