//! Unit-level behaviour of one gossip room through its public API.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{id, ids, op};
use creek_core::{Op, ReplicaId};
use creek_gossip::{Gossip, GossipConfig, Outbox};
use creek_wire::GossipMessage;

const A: ReplicaId = ReplicaId(1);
const B: ReplicaId = ReplicaId(2);
const C: ReplicaId = ReplicaId(3);

fn node(me: ReplicaId, tweak: impl Fn(&mut GossipConfig)) -> Gossip {
    let mut c = GossipConfig::new(me, [A, B, C].into_iter().filter(|&p| p != me));
    tweak(&mut c);
    Gossip::new(c).unwrap()
}

/// Feeds one message; returns (delivered ids, replies).
fn feed(g: &mut Gossip, from: ReplicaId, msg: GossipMessage) -> (Vec<Arc<Op>>, Outbox) {
    g.on_message(from, msg);
    let out = g.take_output();
    (out.delivered, out.messages)
}

fn ops_msg(list: &[(u16, u64)]) -> GossipMessage {
    GossipMessage::Ops(list.iter().map(|&(o, s)| op(o, s)).collect())
}

fn digest(list: &[(ReplicaId, u64)]) -> GossipMessage {
    GossipMessage::Digest {
        delivered: list.to_vec(),
    }
}

/// The ops of every `Ops` message in `out`, with destinations.
fn sent_ops(out: &Outbox) -> Vec<(ReplicaId, Vec<(u16, u64)>)> {
    out.iter()
        .filter_map(|(to, m)| match m {
            GossipMessage::Ops(ops) => {
                Some((*to, ops.iter().map(|o| (o.id.origin.0, o.id.seq)).collect()))
            }
            _ => None,
        })
        .collect()
}

/// The pushes queued in `g` are lost on the way: taken, dropped, and the
/// retransmission timeout passes (so digests are answered with them again).
fn lose_pushes(g: &mut Gossip) {
    let _ = g.take_output();
    for _ in 0..g.config().resend_after_ticks {
        g.tick();
    }
    let _ = g.take_output();
}

fn digests_to(out: &Outbox) -> Vec<ReplicaId> {
    out.iter()
        .filter(|(_, m)| matches!(m, GossipMessage::Digest { .. }))
        .map(|(to, _)| *to)
        .collect()
}

#[test]
fn config_is_validated() {
    let bad = GossipConfig {
        peers: vec![A],
        ..GossipConfig::new(A, [])
    };
    assert!(Gossip::new(bad).is_err());
}

#[test]
fn broadcast_pushes_to_every_peer_in_batches() {
    let mut a = node(A, |c| c.ops_per_message_max = 2);
    for s in 1..=3 {
        a.broadcast(op(1, s));
    }
    assert_eq!(a.stats().pushes_queued, 3);
    assert!(a.has_delivered(id(1, 3)));
    assert_eq!(a.delivered(), vec![(A, 3)]);
    let mut out = Outbox::new();
    out.extend(a.take_output().messages);
    assert_eq!(
        sent_ops(&out),
        vec![
            (B, vec![(1, 1), (1, 2)]),
            (B, vec![(1, 3)]),
            (C, vec![(1, 1), (1, 2)]),
            (C, vec![(1, 3)]),
        ]
    );
    let mut again = Outbox::new();
    again.extend(a.take_output().messages);
    assert!(again.is_empty());
    // Repeats, foreign origins and seq 0 are not broadcast.
    a.broadcast(op(1, 2));
    a.broadcast(op(2, 1));
    a.broadcast(op(1, 0));
    assert_eq!(a.stats().pushes_queued, 0);
    assert_eq!(a.stats().duplicates, 1);
    assert_eq!(a.stats().rejected, 2);
}

#[test]
fn out_of_order_ops_wait_for_the_gap() {
    let mut b = node(B, |_| {});
    let (d, _) = feed(&mut b, A, ops_msg(&[(1, 3), (1, 2), (3, 2)]));
    assert!(d.is_empty());
    assert_eq!(b.stats().buffered, 3);
    let (d, _) = feed(&mut b, C, ops_msg(&[(1, 1), (3, 1), (1, 2)]));
    assert_eq!(
        ids(&d),
        vec![id(1, 1), id(1, 2), id(1, 3), id(3, 1), id(3, 2)]
    );
    assert_eq!(b.stats().buffered, 0);
    assert_eq!(b.stats().duplicates, 1);
    assert_eq!(b.stats().ops_delivered, 5);
    assert_eq!(b.delivered(), vec![(A, 3), (C, 2)]);
}

#[test]
fn buffer_bound_is_respected() {
    let mut b = node(B, |c| c.out_of_order_max = 4);
    let flood: Vec<(u16, u64)> = (2..=50).map(|s| (1, s)).collect();
    let (d, _) = feed(&mut b, A, ops_msg(&flood));
    assert!(d.is_empty());
    assert_eq!(b.stats().buffered, 4);
    assert!(b.stats().overflow_dropped >= 45);
    // Other origins cannot push in while it is full.
    let (d, _) = feed(&mut b, C, ops_msg(&[(3, 2)]));
    assert!(d.is_empty());
    assert_eq!(b.stats().buffered, 4);
    // The gap fills: the buffered ops follow; the rest comes in order.
    let (d, _) = feed(&mut b, A, ops_msg(&[(1, 1)]));
    assert_eq!(ids(&d), (1..=5).map(|s| id(1, s)).collect::<Vec<_>>());
    let rest: Vec<(u16, u64)> = (6..=50).map(|s| (1, s)).collect();
    let (d, _) = feed(&mut b, A, ops_msg(&rest));
    assert_eq!(d.len(), 45);
    assert_eq!(b.delivered(), vec![(A, 50)]);
}

#[test]
fn digest_is_answered_oldest_first_within_the_reply_bound() {
    let mut a = node(A, |c| {
        c.ops_per_message_max = 3;
        c.reply_messages_max = 2;
    });
    for s in 1..=10 {
        a.broadcast(op(1, s));
    }
    lose_pushes(&mut a);
    let (_, out) = feed(&mut a, B, digest(&[(A, 2)]));
    assert_eq!(
        sent_ops(&out),
        vec![
            (B, vec![(1, 3), (1, 4), (1, 5)]),
            (B, vec![(1, 6), (1, 7), (1, 8)])
        ]
    );
    assert!(digests_to(&out).is_empty(), "B knows nothing we lack");
    // B's next digest (it now has up to 8) continues.
    let (_, out) = feed(&mut a, B, digest(&[(A, 8)]));
    assert_eq!(sent_ops(&out), vec![(B, vec![(1, 9), (1, 10)])]);
    // A stale digest does not make A resend what B reported before, nor
    // what is on its way to B.
    let (_, out) = feed(&mut a, B, digest(&[(A, 2)]));
    assert!(out.is_empty());
    let (_, out) = feed(&mut a, B, digest(&[(A, 10)]));
    assert!(out.is_empty());
}

/// Digests that arrive while ops are on their way (an eager push, an
/// earlier answer) are not answered with the same ops again: on a slow link
/// every digest would otherwise add a copy of everything in the air.
#[test]
fn ops_on_their_way_are_not_sent_again_until_the_timeout() {
    let mut a = node(A, |c| c.resend_after_ticks = 5);
    for s in 1..=4 {
        a.broadcast(op(1, s));
    }
    let out = a.take_output().messages;
    assert_eq!(sent_ops(&out).len(), 2, "the eager push to B and C");
    for _ in 0..4 {
        a.tick();
        let (_, out) = feed(&mut a, B, digest(&[]));
        assert!(sent_ops(&out).is_empty(), "the push is on its way");
    }
    // The timeout passes and B still reports nothing: the push was lost.
    a.tick();
    let (_, out) = feed(&mut a, B, digest(&[]));
    assert_eq!(
        sent_ops(&out),
        vec![(B, vec![(1, 1), (1, 2), (1, 3), (1, 4)])]
    );
    // C got it: its report ends the flight, and new ops go at once.
    let (_, out) = feed(&mut a, C, digest(&[(A, 4)]));
    assert!(out.is_empty());
    a.broadcast(op(1, 5));
    let _ = a.take_output();
    lose_pushes(&mut a);
    let (_, out) = feed(&mut a, C, digest(&[(A, 4)]));
    assert_eq!(sent_ops(&out), vec![(C, vec![(1, 5)])]);
}

/// A peer that cannot use what it is sent (stuck behind a gap, or its
/// inbound link dropping everything) reports the same counter on every
/// digest. It is sent what it lacks again only when the timeout passes, and
/// less and less often while it makes no progress.
#[test]
fn a_peer_that_makes_no_progress_is_resent_less_and_less_often() {
    let mut b = node(B, |c| {
        c.resend_after_ticks = 4;
        c.resend_after_ticks_max = 16;
    });
    feed(&mut b, C, ops_msg(&[(3, 1), (3, 2), (3, 3)]));
    let mut resent_at = Vec::new();
    for now in 1..=60 {
        b.tick();
        let _ = b.take_output();
        let (_, out) = feed(&mut b, A, digest(&[]));
        if !sent_ops(&out).is_empty() {
            resent_at.push(now);
        }
    }
    assert_eq!(resent_at, vec![1, 5, 13, 29, 45]);
}

#[test]
fn digest_answer_shares_the_budget_between_origins() {
    let mut a = node(A, |c| {
        c.ops_per_message_max = 4;
        c.reply_messages_max = 1;
    });
    let (d, _) = feed(
        &mut a,
        C,
        ops_msg(&[(3, 1), (3, 2), (3, 3), (3, 4), (3, 5)]),
    );
    assert_eq!(d.len(), 5);
    a.broadcast(op(1, 1));
    lose_pushes(&mut a);
    let (_, out) = feed(&mut a, B, digest(&[]));
    // Two origins lacking: two each would be fair, but A has only one op of
    // its own, so origin 3 gets the leftover.
    assert_eq!(
        sent_ops(&out),
        vec![(B, vec![(1, 1), (3, 1), (3, 2), (3, 3)])]
    );
    // Ops of the digest's sender are never sent back to it.
    let (_, out) = feed(&mut a, C, digest(&[]));
    assert_eq!(sent_ops(&out), vec![(C, vec![(1, 1)])]);
}

#[test]
fn digest_back_only_when_the_sender_knows_strictly_more() {
    let mut a = node(A, |_| {});
    feed(&mut a, C, ops_msg(&[(3, 1), (3, 2)]));
    // Less: ops, no digest.
    let (_, out) = feed(&mut a, B, digest(&[(C, 1)]));
    assert_eq!(sent_ops(&out), vec![(B, vec![(3, 2)])]);
    assert!(digests_to(&out).is_empty());
    // Equal knowledge: no digest back.
    let (_, out) = feed(&mut a, B, digest(&[(C, 2)]));
    assert!(out.is_empty());
    // More: our digest goes back, once per tick.
    let (_, out) = feed(&mut a, B, digest(&[(C, 5)]));
    assert_eq!(digests_to(&out), vec![B]);
    assert_eq!(out[0].1, digest(&[(C, 2)]));
    let (_, out) = feed(&mut a, B, digest(&[(C, 5)]));
    assert!(out.is_empty());
    a.tick();
    let _ = a.take_output();
    let (_, out) = feed(&mut a, B, digest(&[(C, 5)]));
    assert_eq!(digests_to(&out), vec![B]);
    // Claims about our own ops are no reason.
    a.tick();
    let _ = a.take_output();
    let (_, out) = feed(&mut a, B, digest(&[(A, 99), (C, 2)]));
    assert!(out.is_empty());
}

#[test]
fn tick_sends_periodic_digests() {
    let mut a = node(A, |c| c.anti_entropy_every_ticks = 3);
    a.broadcast(op(1, 1));
    let _ = a.take_output(); // the eager push
    let mut out = Outbox::new();
    for _ in 0..6 {
        a.tick();
        out.extend(a.take_output().messages);
    }
    assert_eq!(digests_to(&out), vec![B, C, B, C]);
    assert_eq!(out[0].1, digest(&[(A, 1)]));
    assert_eq!(a.stats().digests_sent, 4);
}

#[test]
fn pull_retrieves_a_specific_op_and_is_rate_limited() {
    let mut a = node(A, |c| c.pull_every_ticks = 2);
    let mut c = node(C, |_| {});
    for s in 1..=3 {
        c.broadcast(op(3, s));
    }
    let _ = c.take_output(); // the eager pushes
    let mut out = Outbox::new();
    a.pull(&[id(3, 2), id(3, 2), id(1, 1), id(3, 0)]);
    out.extend(a.take_output().messages);
    assert_eq!(
        out,
        vec![
            (
                B,
                GossipMessage::Pull {
                    ids: vec![id(3, 2)]
                }
            ),
            (
                C,
                GossipMessage::Pull {
                    ids: vec![id(3, 2)]
                }
            ),
        ]
    );
    // Rate-limited until pull_every_ticks ticks have passed.
    let mut again = Outbox::new();
    a.pull(&[id(3, 2)]);
    again.extend(a.take_output().messages);
    assert!(again.is_empty());
    a.tick();
    again.extend(a.take_output().messages);
    a.pull(&[id(3, 2)]);
    again.extend(a.take_output().messages);
    assert!(again.is_empty());
    a.tick();
    again.extend(a.take_output().messages);
    a.pull(&[id(3, 2)]);
    again.extend(a.take_output().messages);
    assert_eq!(again.len(), 2);
    // C answers with exactly that op; A buffers it (3.1 is missing).
    let (_, reply) = feed(&mut c, A, out[1].1.clone());
    assert_eq!(sent_ops(&reply), vec![(A, vec![(3, 2)])]);
    let (d, _) = feed(&mut a, C, reply[0].1.clone());
    assert!(d.is_empty());
    assert_eq!(a.stats().buffered, 1);
    // A buffered or delivered id is not pulled again.
    let mut none = Outbox::new();
    a.tick();
    none.extend(a.take_output().messages);
    a.tick();
    none.extend(a.take_output().messages);
    a.pull(&[id(3, 2)]);
    none.extend(a.take_output().messages);
    assert!(none
        .iter()
        .all(|(_, m)| !matches!(m, GossipMessage::Pull { .. })));
    assert_eq!(a.stats().pulls_sent, 4);
    // B holds nothing: an empty answer.
    let mut b = node(B, |_| {});
    let (_, reply) = feed(
        &mut b,
        A,
        GossipMessage::Pull {
            ids: vec![id(3, 2)],
        },
    );
    assert!(reply.is_empty());
}

#[test]
fn gc_waits_for_commit_and_every_peer() {
    let mut a = node(A, |_| {});
    for s in 1..=3 {
        a.broadcast(op(1, s));
    }
    feed(&mut a, B, ops_msg(&[(2, 1)]));
    assert_eq!(a.stats().payloads_held, 4);
    a.committed([id(1, 1), id(1, 2), id(2, 1)]);
    assert_eq!(a.stats().payloads_held, 4, "no peer has reported");
    feed(&mut a, B, digest(&[(A, 3), (B, 1)]));
    assert_eq!(a.stats().payloads_held, 4, "C has not reported");
    feed(&mut a, C, digest(&[(A, 1), (B, 1)]));
    assert_eq!(a.stats().payloads_held, 2);
    assert!(a.op(id(1, 1)).is_none());
    assert!(a.op(id(2, 1)).is_none());
    assert!(a.op(id(1, 2)).is_some());
    feed(&mut a, C, digest(&[(A, 3)]));
    assert_eq!(a.stats().payloads_held, 1, "1.3 is not committed");
    a.committed([id(1, 3)]);
    assert_eq!(a.stats().payloads_held, 0);
    assert_eq!(a.stats().gc_dropped, 4);
    // Delivery state survives the payloads.
    assert_eq!(a.delivered(), vec![(A, 3), (B, 1)]);
    let (d, _) = feed(&mut a, B, ops_msg(&[(2, 1)]));
    assert!(d.is_empty());
}

#[test]
fn gc_without_peers_and_commit_before_delivery() {
    let mut solo = Gossip::new(GossipConfig::new(A, [])).unwrap();
    solo.committed([id(1, 1)]);
    solo.broadcast(op(1, 1));
    solo.broadcast(op(1, 2));
    assert_eq!(solo.stats().payloads_held, 1);
    let mut out = Outbox::new();
    out.extend(solo.take_output().messages);
    solo.tick();
    out.extend(solo.take_output().messages);
    assert!(out.is_empty());
}

#[test]
fn hostile_input_neither_panics_nor_breaks_fifo() {
    let mut b = node(B, |c| c.out_of_order_max = 8);
    // Ops claiming B as origin, seq 0, huge seqs, duplicates.
    let (d, out) = feed(
        &mut b,
        A,
        ops_msg(&[
            (2, 1),
            (2, 2),
            (1, 0),
            (1, u64::MAX),
            (1, u64::MAX - 1),
            (1, 1),
            (1, 1),
        ]),
    );
    assert_eq!(ids(&d), vec![id(1, 1)]);
    assert!(out.is_empty());
    assert!(!b.has_delivered(id(2, 1)));
    assert_eq!(b.delivered(), vec![(A, 1)]);
    // Unknown origins are fine.
    let (d, _) = feed(&mut b, A, ops_msg(&[(77, 1)]));
    assert_eq!(ids(&d), vec![id(77, 1)]);
    // Hostile digests: unsorted, repeated, huge counters, unknown origins.
    let (_, out) = feed(
        &mut b,
        C,
        digest(&[(A, u64::MAX), (A, 0), (ReplicaId(9), 5), (B, u64::MAX)]),
    );
    assert_eq!(digests_to(&out), vec![C]);
    // An unknown sender is answered but not trusted for GC.
    let (_, out) = feed(&mut b, ReplicaId(42), digest(&[]));
    assert_eq!(sent_ops(&out), vec![(ReplicaId(42), vec![(1, 1), (77, 1)])]);
    b.committed([id(1, 1), id(77, 1)]);
    assert_eq!(b.stats().payloads_held, 2, "A has not reported");
    // Garbage pulls and messages from ourselves.
    let (_, out) = feed(
        &mut b,
        C,
        GossipMessage::Pull {
            ids: vec![id(1, 0), id(1, u64::MAX), id(1, 1), id(1, 1)],
        },
    );
    assert_eq!(sent_ops(&out), vec![(C, vec![(1, 1)])]);
    let (d, out) = feed(&mut b, B, ops_msg(&[(1, 2)]));
    assert!(d.is_empty() && out.is_empty());
    // FIFO is intact afterwards.
    let (d, _) = feed(&mut b, A, ops_msg(&[(1, 3), (1, 2)]));
    assert_eq!(ids(&d), vec![id(1, 2), id(1, 3)]);
    let s = b.stats();
    assert!(s.buffered <= 8);
    assert!(s.rejected >= 4);
}

/// After a restart from disk (checkpoint ids ∪ kept payloads), FIFO
/// delivery, digests and own broadcast seqs continue where they were; kept
/// payloads answer a peer's digest again; ops at or below the counters are
/// duplicates.
#[test]
fn restore_resumes_counters_and_serves_kept_payloads() {
    let config = GossipConfig::new(B, [A, C]);
    // B had delivered A's 1..=4 (1..=2 are in its checkpoint, 3..=4 kept)
    // and broadcast its own 1..=2 (kept); A.6 is past a gap.
    let kept = vec![op(1, 3), op(1, 4), op(2, 1), op(2, 2), op(1, 6)];
    let mut b = Gossip::restore(
        config,
        [(A, 4, vec![]), (B, 2, vec![]), (A, 1, vec![])],
        kept,
    )
    .unwrap();
    assert_eq!(b.delivered(), vec![(A, 4), (B, 2)]);
    assert_eq!(b.stats().payloads_held, 4, "A.6 waits behind A.5");
    assert_eq!(b.stats().buffered, 1);
    // Duplicates are not delivered again; the next op of A is, and A.6
    // after it.
    let (d, _) = feed(&mut b, A, ops_msg(&[(1, 2), (1, 4), (1, 5)]));
    assert_eq!(ids(&d), vec![id(1, 5), id(1, 6)]);
    // Own seqs continue at 3; a repeat of 2 is refused.
    b.broadcast(op(2, 2));
    assert_eq!(b.stats().duplicates, 3);
    b.broadcast(op(2, 3));
    lose_pushes(&mut b);
    assert_eq!(b.delivered(), vec![(A, 6), (B, 3)]);
    // C lacks everything: B answers with what it holds, oldest first.
    let (_, out) = feed(&mut b, C, digest(&[]));
    let sent: Vec<(u16, u64)> = sent_ops(&out)
        .into_iter()
        .filter(|(to, _)| *to == C)
        .flat_map(|(_, ops)| ops)
        .collect();
    assert_eq!(
        sent,
        vec![(1, 3), (1, 4), (1, 5), (1, 6), (2, 1), (2, 2), (2, 3)]
    );
}

/// A replica that restarts before a checkpoint covered a void finds a gap
/// in an origin's seqs (the voided ids have no payload): the ops kept past
/// it wait, answer pulls, and are delivered once the void is replayed; a
/// late copy of a voided op is a duplicate.
#[test]
fn a_void_replayed_after_a_restart_lets_the_ops_past_it_through() {
    let config = GossipConfig::new(B, [A, C]);
    let kept = vec![op(1, 1), op(1, 2), op(1, 5)];
    let mut b = Gossip::restore(config, [(A, 2, vec![])], kept).unwrap();
    assert_eq!(b.delivered(), vec![(A, 2)]);
    // C pulls A.5: answered from the ops waiting.
    let (_, out) = feed(
        &mut b,
        C,
        GossipMessage::Pull {
            ids: vec![id(1, 5)],
        },
    );
    assert_eq!(sent_ops(&out), vec![(C, vec![(1, 5)])]);
    // The committed order voids A.3 and A.4 (replayed from the log).
    b.void(id(1, 4));
    assert!(b.take_output().delivered.is_empty());
    b.void(id(1, 3));
    assert_eq!(ids(&b.take_output().delivered), vec![id(1, 5)]);
    assert_eq!(b.delivered(), vec![(A, 5)]);
    let (d, _) = feed(&mut b, C, ops_msg(&[(1, 3), (1, 6)]));
    assert_eq!(ids(&d), vec![id(1, 6)]);
}

/// A checkpoint (installed from a peer, or found at a restart) may commit
/// ids past a gap: A.4 and A.5 committed while A.3 was neither received nor
/// voided where it was taken, and no replica keeps their payloads any more.
/// They count as held: once A.3 is voided, A.6 (arrived meanwhile) is
/// delivered past them, and late copies of them are duplicates.
#[test]
fn ids_a_checkpoint_committed_past_a_gap_are_not_waited_for() {
    let config = GossipConfig::new(B, [A, C]);
    let mut b = Gossip::restore(config, [(A, 2, vec![4, 5])], Vec::new()).unwrap();
    assert_eq!(b.delivered(), vec![(A, 2)]);
    let (d, _) = feed(&mut b, A, ops_msg(&[(1, 6)]));
    assert!(d.is_empty(), "A.6 waits for A.3");
    b.void(id(1, 3));
    assert_eq!(ids(&b.take_output().delivered), vec![id(1, 6)]);
    assert_eq!(b.delivered(), vec![(A, 6)]);
    let (d, _) = feed(&mut b, C, ops_msg(&[(1, 4), (1, 5), (1, 7)]));
    assert_eq!(ids(&d), vec![id(1, 7)]);
}

/// A loose range opened over ids the replica holds without a payload in
/// gossip (committed and collected, or in an installed checkpoint) counts
/// them as received: only the others are pulled, or voided if none comes.
#[test]
fn a_loose_range_counts_what_the_replica_holds() {
    let config = GossipConfig::new(B, [A, C]);
    let mut b = Gossip::restore(config, [(A, 10, vec![])], Vec::new()).unwrap();
    b.open_range(A, 3, 8, |id| id.seq != 5);
    assert_eq!(b.loose_missing(A, 10), vec![id(1, 5)]);
}

#[test]
fn messages_are_bounded_in_bytes_as_well_as_ops() {
    let mut a = node(A, |c| c.message_bytes_max = 3 << 20);
    let big = |seq| {
        let mut o = (*op(1, seq)).clone();
        o.call.args = vec![7u8; 1 << 20].into();
        Arc::new(o)
    };
    for seq in 1..=7 {
        a.broadcast(big(seq));
    }
    let out = a.take_output().messages;
    let to_b: Vec<Vec<(u16, u64)>> = sent_ops(&out)
        .into_iter()
        .filter(|(to, _)| *to == B)
        .map(|(_, ops)| ops)
        .collect();
    // Two 1 MiB ops per 3 MiB message (with room for the fields), every op
    // once, in order.
    assert_eq!(to_b.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 2, 1]);
    let all: Vec<(u16, u64)> = to_b.concat();
    assert_eq!(all, (1..=7).map(|s| (1, s)).collect::<Vec<_>>());
    // An op larger than the bound goes alone rather than never.
    let mut small = node(A, |c| c.message_bytes_max = 1000);
    small.broadcast(big(1));
    small.broadcast(big(2));
    let lens: Vec<usize> = sent_ops(&small.take_output().messages)
        .into_iter()
        .filter(|(to, _)| *to == B)
        .map(|(_, ops)| ops.len())
        .collect();
    assert_eq!(lens, [1, 1]);
}
