//! Preliminary views that wait for durability, chosen per invocation
//! ([`AnswerAfter`], docs/api.md "Durable weak writes"): a weak op's
//! preliminary view normally leaves as soon as the op ran on this
//! replica's tentative state, before anything is on disk, so it can be
//! lost with this replica. Asked to, the node holds that view until the
//! write carrying the op's payload is durable here (`Local`), or until a
//! majority of the voters hold the payload durably (`Majority`: this
//! replica's write, and peers whose gossip digests report holding the op —
//! a digest leaves a replica only once the writes it reports are durable,
//! the hold rule of [`ready`](crate::ready)). Either way the view still
//! comes before the op commits; the op itself is unchanged.
//!
//! The invariant: a view released at `Local` has its payload in a durable
//! write of this replica; one released at `Majority` has it durable at a
//! majority of the voters, so no single lost disk and no crash can lose
//! the op (with or without this replica).

use std::collections::{BTreeSet, HashMap};

use creek_core::{ExecKey, OpId, ReplicaId, View, ViewKind};

/// When a preliminary view may leave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AnswerAfter {
    /// At once, from the tentative execution (the default).
    #[default]
    Execution,
    /// Once this replica's write of the op's payload is durable.
    Local,
    /// Once a majority of the voters hold the op's payload durably.
    Majority,
}

/// How long a held view is kept for a client that may have gone (its
/// deadline is far shorter): the list stays bounded whatever happens.
const HELD_FOR_US: u64 = 300_000_000;

/// A view waiting for its op's payload to be durable enough.
#[derive(Debug)]
struct Held {
    view: View,
    id: OpId,
    after: AnswerAfter,
    /// The write that carries the payload, once one was handed out.
    write: Option<u64>,
    since_us: u64,
}

/// The invocations that wait, and their held views.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    /// Invocations asked to wait, by handle, until their first
    /// preliminary view.
    asked: HashMap<ExecKey, (AnswerAfter, u64)>,
    held: Vec<Held>,
    /// The node's clock at its last tick.
    now_us: u64,
}

impl Waiting {
    /// Invocation `handle` wants its preliminary view only once its op is
    /// durable as `after` says (nothing to do for `Execution`, or for a
    /// local read, which writes nothing anywhere).
    pub(crate) fn ask(&mut self, handle: ExecKey, after: AnswerAfter) {
        if after != AnswerAfter::Execution && matches!(handle, ExecKey::Op(_)) {
            self.asked.insert(handle, (after, self.now_us));
        }
    }

    /// Pass `view` on (into `out`) or hold it. A final view releases a
    /// held preliminary view of the same op first: a committed op is
    /// durable at a majority.
    pub(crate) fn route(&mut self, view: View, out: &mut Vec<View>) {
        let ExecKey::Op(id) = view.handle else {
            out.push(view);
            return;
        };
        let at = self.held.iter().position(|h| h.view.handle == view.handle);
        match view.kind {
            ViewKind::Tentative => {
                // A later preliminary view (a re-execution) replaces a
                // held one: it leaves when that one would have.
                if let Some(at) = at {
                    self.held[at].view = view;
                    return;
                }
                if let Some((after, _)) = self.asked.remove(&view.handle) {
                    self.held.push(Held {
                        view,
                        id,
                        after,
                        write: None,
                        since_us: self.now_us,
                    });
                    return;
                }
            }
            kind if kind.is_final() => {
                self.asked.remove(&view.handle);
                if let Some(at) = at {
                    out.push(self.held.remove(at).view);
                }
            }
            _ => {}
        }
        out.push(view);
    }

    /// The write just handed out (`written`) carries the payloads of the
    /// views held since the last one.
    pub(crate) fn written(&mut self, written: u64) {
        for h in self.held.iter_mut().filter(|h| h.write.is_none()) {
            h.write = Some(written);
        }
    }

    /// Release (into `out`) every held view whose op is now durable
    /// enough: `durable` is this replica's last durable write, `halves`
    /// the voters of each half of the configuration (a majority of each
    /// is needed), `holds(peer, id)` whether a peer reported holding an
    /// op. Views held past [`HELD_FOR_US`] are dropped.
    pub(crate) fn release(
        &mut self,
        me: ReplicaId,
        durable: u64,
        halves: &[BTreeSet<ReplicaId>],
        holds: impl Fn(ReplicaId, OpId) -> bool,
        out: &mut Vec<View>,
    ) {
        let now_us = self.now_us;
        // An op that never gets a view (voided with its origin's data)
        // leaves its entry here: bounded by the same time.
        self.asked
            .retain(|_, (_, since)| now_us.saturating_sub(*since) < HELD_FOR_US);
        if self.held.is_empty() {
            return;
        }
        let mut kept = Vec::with_capacity(self.held.len());
        for h in std::mem::take(&mut self.held) {
            // This replica's own write comes first at every level.
            let here = h.write.is_some_and(|w| w <= durable);
            let ready = here
                && match h.after {
                    AnswerAfter::Execution | AnswerAfter::Local => true,
                    AnswerAfter::Majority => halves.iter().all(|voters| {
                        let holding = voters
                            .iter()
                            .filter(|p| **p == me || holds(**p, h.id))
                            .count();
                        holding > voters.len() / 2
                    }),
                };
            if ready {
                out.push(h.view);
            } else if now_us.saturating_sub(h.since_us) < HELD_FOR_US {
                kept.push(h);
            }
        }
        self.held = kept;
    }

    /// The node's clock moved on.
    pub(crate) fn tick(&mut self, now_us: u64) {
        self.now_us = now_us;
    }

    /// Views held now.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use creek_core::ReplicaId;

    fn view(seq: u64, kind: ViewKind) -> View {
        View {
            handle: ExecKey::Op(OpId {
                origin: ReplicaId(1),
                seq,
            }),
            kind,
            outcome: Ok(bytes::Bytes::new()),
            across_shards: false,
            executions: 0,
            time: 0,
        }
    }

    fn voters() -> Vec<BTreeSet<ReplicaId>> {
        vec![[1, 2, 3].map(ReplicaId).into_iter().collect()]
    }

    #[test]
    fn a_local_view_waits_for_its_write_and_a_majority_view_for_a_peer_too() {
        let mut w = Waiting::default();
        let mut out = Vec::new();
        for (seq, after) in [(1, AnswerAfter::Local), (2, AnswerAfter::Majority)] {
            let v = view(seq, ViewKind::Tentative);
            w.ask(v.handle, after);
            w.route(v, &mut out);
        }
        // Not asked to wait: passes at once.
        w.route(view(3, ViewKind::Tentative), &mut out);
        assert_eq!(out.len(), 1);
        w.written(7);
        let nobody = |_: ReplicaId, _: OpId| false;
        w.release(ReplicaId(1), 6, &voters(), nobody, &mut out);
        assert_eq!((out.len(), w.held()), (1, 2), "write 7 is not durable yet");
        w.release(ReplicaId(1), 7, &voters(), nobody, &mut out);
        assert_eq!((out.len(), w.held()), (2, 1), "the local one goes");
        let peer2 = |p: ReplicaId, id: OpId| p == ReplicaId(2) && id.seq == 2;
        w.release(ReplicaId(1), 7, &voters(), peer2, &mut out);
        assert_eq!((out.len(), w.held()), (3, 0), "2 of 3 hold it");
    }

    #[test]
    fn a_later_preliminary_view_replaces_a_held_one_and_joint_halves_each_need_a_majority() {
        let mut w = Waiting::default();
        let mut out = Vec::new();
        let first = view(1, ViewKind::Tentative);
        w.ask(first.handle, AnswerAfter::Majority);
        w.route(first, &mut out);
        let mut again = view(1, ViewKind::Tentative);
        again.executions = 2;
        w.route(again, &mut out);
        assert!(out.is_empty(), "the re-execution's view waits too");
        w.written(1);
        // Joint: {1, 2, 3} and {1, 4, 5}; replica 2 holds it, 4 and 5 not.
        let halves = vec![
            [1, 2, 3].map(ReplicaId).into_iter().collect(),
            [1, 4, 5].map(ReplicaId).into_iter().collect(),
        ];
        let peer2 = |p: ReplicaId, _: OpId| p == ReplicaId(2);
        w.release(ReplicaId(1), 1, &halves, peer2, &mut out);
        assert!(out.is_empty(), "no majority of the second half");
        let peers24 = |p: ReplicaId, _: OpId| p == ReplicaId(2) || p == ReplicaId(4);
        w.release(ReplicaId(1), 1, &halves, peers24, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].executions, 2, "the latest view leaves");
    }

    #[test]
    fn a_final_view_releases_its_held_preliminary_first_and_old_ones_are_dropped() {
        let mut w = Waiting::default();
        let mut out = Vec::new();
        for seq in [1, 2] {
            let v = view(seq, ViewKind::Tentative);
            w.ask(v.handle, AnswerAfter::Majority);
            w.route(v, &mut out);
        }
        w.route(view(1, ViewKind::Stable), &mut out);
        let kinds: Vec<ViewKind> = out.iter().map(|v| v.kind).collect();
        assert_eq!(kinds, [ViewKind::Tentative, ViewKind::Stable]);
        let nobody = |_: ReplicaId, _: OpId| false;
        w.tick(HELD_FOR_US);
        w.release(ReplicaId(1), 0, &voters(), nobody, &mut out);
        assert_eq!(w.held(), 0, "held past its time: dropped");
        assert_eq!(out.len(), 2);
    }
}
