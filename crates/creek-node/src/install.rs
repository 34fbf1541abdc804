//! State transfer as the node sees it (the protocol is in
//! [`transfer`](crate::transfer)): members serve checkpoints to peers; a
//! lagging member, one whose held append waited too long, or a replica
//! that lost its data fetches one; a fetched checkpoint replaces the
//! replica's and gossip's state.

use std::sync::Arc;

use creek_cab::{Cab, CabStorage};
use creek_core::{Checkpoint, Op, Replica, ReplicaId};
use creek_gossip::Gossip;
use creek_wire::SnapshotMessage;

use crate::transfer::Fetched;
use crate::{group, Node, Standing, TransferDone};

/// A member that has waited this many ticks on one log index for payloads
/// (its first undelivered decided id, or its first held append) fetches a
/// checkpoint that covers it (see [`Node::held_too_long`]).
const HELD_FETCH_TICKS: u64 = 500;

impl<S: CabStorage> Node<S> {
    /// State transfer (see [`transfer`](crate::transfer)): members serve
    /// checkpoints to any peer of the cluster (a lost one included); a chunk
    /// that completes a fetch is installed.
    pub(crate) fn on_snapshot(&mut self, from: ReplicaId, m: SnapshotMessage) {
        if self.membership.foreign_peers().contains(&from) {
            self.refused_non_members += 1;
            return;
        }
        match m {
            SnapshotMessage::Fetch {
                transfer,
                min_index,
                offset,
            } => {
                if !self.membership.is_member() {
                    return;
                }
                let current = self.cab.delivered_through();
                let group = self.group();
                let (replica, cab) = (&self.replica, &self.cab);
                self.transfers
                    .on_fetch(from, transfer, min_index, offset, current, || {
                        serving_checkpoint(replica, cab, group)
                    });
            }
            SnapshotMessage::Chunk(c) => self.transfers.on_chunk(from, c),
            SnapshotMessage::Refused { transfer, retry } => {
                self.transfers.on_refused(from, transfer, retry);
            }
        }
    }

    /// Serve the fetches a member refused for want of a checkpoint, once it
    /// is at a clean point (a busy one seldom is when a fetch arrives).
    pub(crate) fn serve_deferred(&mut self) {
        if !self.transfers.has_deferred() || !self.membership.is_member() {
            return;
        }
        let current = self.cab.delivered_through();
        let group = self.group();
        let (replica, cab) = (&self.replica, &self.cab);
        self.transfers
            .serve_deferred(current, || serving_checkpoint(replica, cab, group));
    }

    /// Start (or keep up) the fetch this replica needs: a lagging member
    /// the checkpoint CAB's held snapshot asks for; a lost replica, once
    /// every peer answered it, any member's.
    pub(crate) fn want_state(&mut self) {
        match self.membership.standing() {
            Standing::Member => match self.cab.wanted_snapshot().or(self.held_too_long()) {
                Some((from, index)) => self.transfers.fetch(from, index),
                None => self.transfers.cancel_fetch(),
            },
            Standing::Lost { .. } => {
                if let Some(source) = self.membership.rebuild_marks().map(|m| m.source) {
                    // Index 1 at least: a cluster that committed nothing has
                    // nothing to rebuild from yet.
                    self.transfers.fetch(source, 1);
                }
            }
            Standing::Joining { .. } | Standing::Removed => {}
        }
    }

    /// The first held append has waited [`HELD_FETCH_TICKS`] for payloads:
    /// the peer to fetch a checkpoint from (the leader), and the index it
    /// must cover. The ops it waits on may be gone from every peer: a
    /// payload is collected once it is committed at its holder and every
    /// peer reported holding it, and a peer may have reported it just
    /// before it crashed or lost its data (a report is forgotten only once
    /// the peer says it lost its data, which it may say too briefly to be
    /// heard). Committed ops travel in checkpoints instead.
    ///
    /// Without a known leader, the sender of the held append: a replica
    /// waiting on payloads no peer has is pushed the ops after the gap by
    /// every anti-entropy round, and that flood can delay the leader's
    /// heartbeats past the election timeout, so it may keep campaigning
    /// without ever learning the leader (chaos seed 7, docs/reliability.md).
    fn held_too_long(&self) -> Option<(ReplicaId, u64)> {
        let (index, ticks) = self.held_wait?;
        let source = self
            .cab
            .leader()
            .or_else(|| self.cab.held_sender())
            .filter(|l| *l != self.id())?;
        (ticks >= HELD_FETCH_TICKS).then_some((source, index))
    }

    /// Count the ticks this replica waits for payloads on the same log
    /// index: the first decided id not delivered for want of its payload or
    /// causal context, or else CAB's first held append. Both can wait on ops
    /// no peer keeps any more; a held queue also empties and refills as
    /// appends are retried, so the first decided id is watched first.
    pub(crate) fn watch_held(&mut self) {
        let waits_on = self.cab.decided_from().or(self.cab.held_from());
        self.held_wait = match (self.held_wait, waits_on) {
            (Some((at, ticks)), Some(index)) if at == index => Some((at, ticks + 1)),
            (_, index) => index.map(|i| (i, 0)),
        };
    }

    /// A [`TransferJob`](crate::TransferJob) of
    /// [`Ready::transfer_jobs`](crate::Ready::transfer_jobs) is done: a
    /// checkpoint to serve is encoded (the fetches waiting for it are
    /// answered), or one fetched is decoded (and installed).
    pub fn on_transfer_done(&mut self, done: TransferDone) {
        if let Some(fetched) = self.transfers.on_done(done) {
            self.install(fetched);
        }
    }

    /// A verified checkpoint from a peer: a lagging member installs it if
    /// it still covers what CAB's held snapshot needs; a lost replica is
    /// rebuilt from it.
    fn install(&mut self, fetched: Fetched) {
        let Fetched {
            from,
            mut checkpoint,
            term,
        } = fetched;
        let own = self.id();
        let own_high = checkpoint
            .causal_ctx
            .to_runs()
            .into_iter()
            .find(|(origin, _, _)| *origin == own)
            .map_or(0, |(_, counter, runs)| runs.last().map_or(counter, |r| r.1));
        match self.membership.standing() {
            Standing::Member => {
                let Some((_, wanted)) = self.cab.wanted_snapshot() else {
                    self.install_past_held(checkpoint, own_high);
                    return;
                };
                if checkpoint.cab_applied < wanted
                    || checkpoint.committed_len < self.replica.committed_len()
                {
                    self.transfers.fetch(from, wanted);
                    return;
                }
                // The log restarts at the snapshot's index: entries between
                // it and the checkpoint's are delivered again, and their ids
                // ignored as committed. The state is replaced only if the
                // log is (a state ahead of the log could never restart).
                if !self.cab.install_snapshot() {
                    return;
                }
                checkpoint.cab_applied = wanted;
                let next = own_high.max(self.replica.last_issued_seq()) + 1;
                let group = std::mem::take(&mut checkpoint.group);
                self.replace_state(checkpoint, next);
                self.install_group(&group);
            }
            Standing::Lost { .. } => {
                let Some(marks) = self.membership.rebuild_marks() else {
                    return;
                };
                let index = checkpoint.cab_applied;
                let conf = if checkpoint.group.is_unknown() {
                    self.cab.store().conf()
                } else {
                    group::conf_of(&checkpoint.group)
                };
                // Taken before this replica was added (or not taken by the
                // library): a newer one will name it. The log restarts at
                // the checkpoint before the state is replaced by it.
                if !self.cab.restore_lost(from, index, term, marks.term, conf) {
                    self.transfers.fetch(from, index + 1);
                    return;
                }
                // Past what peers hold, past what they heard this replica
                // reserve before it lost its data (the ops a client saw but
                // no peer received were lost with it: their ids are not
                // issued again), and past the seqs it reserved itself since
                // (a restart while lost takes a reservation like any other).
                let held = own_high.max(marks.own_seq);
                let next = held.max(marks.own_reserved).max(self.own_floor) + 1;
                self.rebuilt_held = Some(held);
                self.own_floor = next - 1;
                self.rebuilt_floor = next - 1;
                let group = std::mem::take(&mut checkpoint.group);
                self.replace_state(checkpoint, next);
                self.install_group(&group);
                // Entries a peer holds past the checkpoint may be committed
                // with the lost data's acknowledgements: until this replica
                // holds them, it must not help a shorter log win.
                self.cab.catch_up_to(marks.last_index);
                self.membership.rebuilt(self.own_floor, marks.last_index);
            }
            Standing::Joining { .. } | Standing::Removed => {}
        }
    }

    /// A member whose held append waited too long (see
    /// [`Node::held_too_long`]) takes `checkpoint` if it covers the held
    /// index and is ahead of this replica. The log stays as it is: the
    /// entries up to the checkpoint's index are delivered again, their ids
    /// ignored as committed (so the checkpoint is written as covering only
    /// what CAB delivered here, with the group as applied here, and a
    /// restart redelivers the rest the same way). The group changes in
    /// those entries apply as they come.
    fn install_past_held(&mut self, mut checkpoint: Checkpoint, own_high: u64) {
        let Some((_, index)) = self.held_too_long() else {
            return;
        };
        if checkpoint.cab_applied < index
            || checkpoint.committed_len <= self.replica.committed_len()
        {
            return;
        }
        checkpoint.cab_applied = self.cab.delivered_through();
        checkpoint.group = self.group();
        let next = own_high.max(self.replica.last_issued_seq()) + 1;
        self.replace_state(checkpoint, next);
        self.transfers.installed_past_held();
        self.held_wait = None;
        self.transfers.cancel_fetch();
    }

    /// Replace the replica and gossip state with `checkpoint`'s, keeping the
    /// ops held here that it does not cover (tentative ones, own ones among
    /// them), with own seqs resuming at `next_event_no`. Waiting clients
    /// lose their views (their ops stay, and commit, like a crashed
    /// replica's). The checkpoint goes into the next write.
    fn replace_state(&mut self, mut checkpoint: Checkpoint, next_event_no: u64) {
        let kept: Vec<Arc<Op>> = self
            .replica
            .tentative()
            .into_iter()
            .filter(|id| !checkpoint.causal_ctx.contains(*id))
            .filter_map(|id| self.replica.op(id).cloned())
            .collect();
        checkpoint.next_event_no = next_event_no;
        let own = self.id();
        let mut held_ids = checkpoint.causal_ctx.clone();
        for op in &kept {
            held_ids.insert(op.id);
        }
        // Ids the checkpoint committed past a gap (after ids voided, or not
        // received, where it was taken) are held too: delivery goes past
        // them once the gap is voided or opened.
        let delivered = held_ids.to_records().into_iter().chain(std::iter::once((
            own,
            next_event_no - 1,
            Vec::new(),
        )));
        let config = self.replica.config().clone();
        let registry = self.replica.registry().clone();
        let rebuilt = Gossip::restore(self.gossip.config().clone(), delivered, kept.clone())
            .map_err(|e| e.to_string())
            .and_then(|g| {
                Replica::restore(config, registry, Some(checkpoint.clone()), kept)
                    .map(|r| (r, g))
                    .map_err(|e| e.to_string())
            });
        match rebuilt {
            Ok((replica, gossip)) => {
                // A watcher of changes goes on watching the rebuilt replica
                // (it sees the jump in positions: the checkpoint's ops were
                // never executed here).
                let (committed, tentative) = self.replica.recording();
                self.replica = replica;
                self.replica.record_changes(committed, tentative);
                self.keep_history_again();
                // The decided ids the old replica held back go to the new
                // one (it ignores those the checkpoint committed).
                self.cab.hand_again();
                self.gossip = gossip;
                self.committed_told = self.replica.committed_len();
                self.installed = Some(checkpoint);
                self.reclaim_own_ops();
                for (peer, floor) in self.peer_floors.clone() {
                    if self.membership.accepts(peer) {
                        self.open_peer_range(peer, floor);
                    }
                }
            }
            // The configurations were accepted when the node started.
            Err(e) => self.on_disk_failure(format!("installing a checkpoint: {e}")),
        }
    }
}

/// A checkpoint of the committed state to serve a fetch, at the consensus
/// index delivered, with that entry's term; `None` away from a clean point.
fn serving_checkpoint<S: CabStorage>(
    replica: &Replica,
    cab: &Cab<S>,
    group: creek_core::Group,
) -> Option<(Checkpoint, u64)> {
    let mut c = replica.checkpoint()?;
    c.cab_applied = cab.delivered_through();
    c.group = group;
    let term = cab.store().term(c.cab_applied).ok()?;
    Some((c, term))
}
