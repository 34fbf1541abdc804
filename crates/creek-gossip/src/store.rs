//! Payloads held for answering peers, what peers are known to hold, and the
//! garbage collection that drops a payload nobody can need any more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use creek_core::{Dvv, Op, OpId, ReplicaId};

/// The delivered ops this replica still holds, with the facts that decide
/// when each may go: committed here, and held by every peer.
#[derive(Debug, Default)]
pub(crate) struct Store {
    /// Delivered ops (own and remote) still held.
    held: BTreeMap<OpId, Arc<Op>>,
    /// Every id reported committed here (compact: per origin a counter plus
    /// a few exceptions).
    committed: Dvv,
    /// Held ops that are committed, per origin: they go once every peer
    /// holds them.
    ready: BTreeMap<ReplicaId, BTreeSet<u64>>,
    /// Per peer, per origin: the highest contiguous counter the peer has
    /// reported (never decreases).
    acks: BTreeMap<ReplicaId, BTreeMap<ReplicaId, u64>>,
}

impl Store {
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = OpId> + '_ {
        self.held.keys().copied()
    }

    pub(crate) fn get(&self, id: OpId) -> Option<&Arc<Op>> {
        self.held.get(&id)
    }

    /// The held ops of `origin` with `from <= seq <= to`, by seq (none when
    /// `from > to`).
    pub(crate) fn range(
        &self,
        origin: ReplicaId,
        from: u64,
        to: u64,
    ) -> impl Iterator<Item = &Arc<Op>> + '_ {
        self.held
            .range(OpId::new(origin, from)..)
            .take_while(move |(id, _)| id.origin == origin && id.seq <= to)
            .map(|(_, op)| op)
    }

    /// Holds a delivered op.
    pub(crate) fn insert(&mut self, op: Arc<Op>) {
        let id = op.id;
        if self.committed.contains(id) {
            self.ready.entry(id.origin).or_default().insert(id.seq);
        }
        self.held.insert(id, op);
    }

    /// Records that `id` is committed at this replica.
    pub(crate) fn commit(&mut self, id: OpId) {
        if self.committed.insert(id) && self.held.contains_key(&id) {
            self.ready.entry(id.origin).or_default().insert(id.seq);
        }
    }

    /// Records that `peer` holds every op of `origin` up to `counter`.
    pub(crate) fn ack(&mut self, peer: ReplicaId, origin: ReplicaId, counter: u64) {
        if counter == 0 {
            return;
        }
        let c = self
            .acks
            .entry(peer)
            .or_default()
            .entry(origin)
            .or_insert(0);
        *c = (*c).max(counter);
    }

    /// Forget what `peer` reported: it lost its data.
    pub(crate) fn forget(&mut self, peer: ReplicaId) {
        self.acks.remove(&peer);
    }

    /// The highest counter `peer` has reported for `origin`.
    pub(crate) fn acked(&self, peer: ReplicaId, origin: ReplicaId) -> u64 {
        self.acks
            .get(&peer)
            .and_then(|m| m.get(&origin))
            .copied()
            .unwrap_or(0)
    }

    /// Drops every held op that is committed here and held by all `peers`
    /// (all of them, when there are none). Returns how many went. Costs one
    /// step per origin with committed held ops plus one per op dropped.
    pub(crate) fn collect(&mut self, peers: &BTreeSet<ReplicaId>) -> u64 {
        let mut dropped = 0u64;
        let origins: Vec<ReplicaId> = self.ready.keys().copied().collect();
        for origin in origins {
            let everyone = peers
                .iter()
                .map(|&p| self.acked(p, origin))
                .min()
                .unwrap_or(u64::MAX);
            let Some(seqs) = self.ready.get_mut(&origin) else {
                continue;
            };
            let gone = match everyone.checked_add(1) {
                Some(above) => {
                    let keep = seqs.split_off(&above);
                    std::mem::replace(seqs, keep)
                }
                None => std::mem::take(seqs),
            };
            if seqs.is_empty() {
                self.ready.remove(&origin);
            }
            for seq in gone {
                // Paired with `commit`/`insert`, which mark only committed
                // held ops ready: nothing uncommitted is ever dropped.
                assert!(
                    self.committed.contains(OpId::new(origin, seq)),
                    "collecting r{}.{seq}, which is not committed here",
                    origin.0
                );
                if self.held.remove(&OpId::new(origin, seq)).is_some() {
                    dropped += 1;
                }
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::op;

    fn id(origin: u16, seq: u64) -> OpId {
        OpId::new(ReplicaId(origin), seq)
    }

    #[test]
    fn drops_only_committed_ops_every_peer_holds() {
        let peers: BTreeSet<ReplicaId> = [ReplicaId(2), ReplicaId(3)].into();
        let mut s = Store::default();
        for seq in 1..=4 {
            s.insert(op(1, seq));
        }
        s.commit(id(1, 1));
        s.commit(id(1, 2));
        s.commit(id(1, 4));
        assert_eq!(s.collect(&peers), 0);
        s.ack(ReplicaId(2), ReplicaId(1), 4);
        assert_eq!(s.collect(&peers), 0, "peer 3 has reported nothing");
        s.ack(ReplicaId(3), ReplicaId(1), 3);
        s.ack(ReplicaId(3), ReplicaId(1), 1); // never decreases
        assert_eq!(s.acked(ReplicaId(3), ReplicaId(1)), 3);
        assert_eq!(s.collect(&peers), 2);
        assert!(s.get(id(1, 3)).is_some(), "not committed");
        assert!(s.get(id(1, 4)).is_some(), "peer 3 lacks it");
        s.ack(ReplicaId(3), ReplicaId(1), 4);
        assert_eq!(s.collect(&peers), 1);
        s.commit(id(1, 3));
        assert_eq!(s.collect(&peers), 1);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn commit_before_delivery_and_no_peers() {
        let mut s = Store::default();
        s.commit(id(5, 1));
        s.insert(op(5, 1));
        s.insert(op(5, 2));
        assert_eq!(s.collect(&BTreeSet::new()), 1);
        assert_eq!(s.range(ReplicaId(5), 1, 9).count(), 1);
        assert_eq!(s.range(ReplicaId(5), 3, 1).count(), 0);
    }
}
