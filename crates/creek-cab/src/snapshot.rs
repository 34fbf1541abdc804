//! Snapshots, which carry no state here (the caller's checkpoint does): a
//! follower's snapshot is held until the caller installed a checkpoint
//! covering it; a replica that lost its data is rebuilt at a peer's
//! checkpoint and keeps from electing a shorter log until it caught up; a
//! leader resends a snapshot that was not installed.

use bytes::Bytes;
use creek_core::ReplicaId;
use raft::eraftpb::{Message, MessageType};

use crate::{members_of, raft_id, Cab, CabStorage, Conf, ConfApplied};

/// A leader whose snapshot to a follower was not installed after this many
/// library ticks sends it again (the follower may have restarted and
/// forgotten it, or the leader compacted further meanwhile).
pub const SNAPSHOT_RETRY_TICKS: u64 = 100;

impl<S: CabStorage> Cab<S> {
    /// The snapshot this node waits for, if any: its sender and index. The
    /// caller fetches a checkpoint covering at least that index (from the
    /// sender, or any peer), installs it, then calls
    /// [`Cab::install_snapshot`].
    pub fn wanted_snapshot(&self) -> Option<(ReplicaId, u64)> {
        self.held_snapshot
            .as_ref()
            .map(|(from, m)| (*from, m.get_snapshot().get_metadata().index))
    }

    /// The caller's state now covers the held snapshot's index: let the
    /// library install it (the log becomes empty at that index, and the
    /// leader's appends continue from there). Delivery restarts after the
    /// index; ids decided at or before it are forgotten, and one decided
    /// again later is delivered again, which the replica ignores as
    /// committed.
    ///
    /// Returns whether the library installed it. While the caller fetched
    /// its checkpoint a newer term may have begun, or this log committed
    /// past the index: the library then no longer takes the snapshot (it
    /// answers it as it answers any stale one), and the caller must keep
    /// its state, or that state would run ahead of the log it restarts
    /// from. The next snapshot a leader sends is held and fetched anew.
    pub fn install_snapshot(&mut self) -> bool {
        let Some((_, m)) = self.held_snapshot.take() else {
            return false;
        };
        let index = m.get_snapshot().get_metadata().index;
        if self.node.step(m).is_err() {
            self.stats.refused += 1;
        }
        self.restored_at(index) && self.store_restored()
    }

    /// Run the Ready that carries a snapshot the library just restored, so
    /// the storage holds the log restarted at its index before the caller
    /// replaces its state: the caller's next write then stores the
    /// checkpoint with the log it restarts from. Left for a later poll, the
    /// restart would reach the disk in a write after the checkpoint's, and
    /// a crash between the two would leave a checkpoint past the stored
    /// log (chaos seed 107, docs/reliability.md). `false` if storing failed
    /// (CAB stops).
    fn store_restored(&mut self) -> bool {
        if let Err(e) = self.handle_ready() {
            self.failed = Some(e);
        }
        self.failed.is_none()
    }

    /// Whether the library just restored a snapshot at `index`: its log
    /// starts there, and the snapshot waits for the next `Ready`.
    fn restored_at(&self, index: u64) -> bool {
        self.node
            .raft
            .raft_log
            .unstable_snapshot()
            .as_ref()
            .is_some_and(|s| s.get_metadata().index == index)
    }

    /// Rebuild a replica that lost its data from a peer's checkpoint at
    /// consensus `index` (whose entry has `term`): the log becomes empty at
    /// that index, as if `from` had sent that snapshot in term `max_term`,
    /// the highest term any peer reports. The node also records a vote of
    /// its own in that term: it may have voted in it before it lost its
    /// data, and no term after it can have seen its vote (every candidate
    /// that asked for it is a peer whose term is at most `max_term`).
    ///
    /// `conf` is the group's configuration the checkpoint was taken with;
    /// the rebuilt log starts from it. A configuration without this replica
    /// (a checkpoint taken before it was added) cannot be installed: `false`,
    /// and nothing changed — the caller fetches a newer checkpoint. So is
    /// one the library does not take (see [`Cab::install_snapshot`]).
    pub fn restore_lost(
        &mut self,
        from: ReplicaId,
        index: u64,
        term: u64,
        max_term: u64,
        conf: Conf,
    ) -> bool {
        if !members_of(&conf.state).contains(&self.config.me) {
            return false;
        }
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        m.from = raft_id(from);
        m.to = raft_id(self.config.me);
        m.term = max_term.max(term).max(self.node.raft.term);
        let snap = m.mut_snapshot();
        snap.data = conf.index.to_le_bytes().to_vec().into();
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(conf.state);
        self.held_snapshot = None;
        if self.node.step(m).is_err() {
            self.stats.refused += 1;
        }
        if !self.restored_at(index) {
            return false;
        }
        self.node.raft.vote = raft_id(self.config.me);
        self.store_restored()
    }

    /// `peer` lost its data (its peers learnt so from it): whatever it
    /// acknowledged is gone. A leader forgets its progress — so nothing
    /// counts its old acknowledgements toward a commit, and no heartbeat
    /// tells its rebuilt log a commit index past its end — and probes it
    /// afresh once it takes part again.
    pub fn forget_peer(&mut self, peer: ReplicaId) {
        if !self.is_leader() || peer == self.config.me {
            return;
        }
        let id = raft_id(peer);
        let last = self.node.raft.raft_log.last_index();
        if let Some(pr) = self.node.raft.mut_prs().get_mut(id) {
            pr.matched = 0;
            pr.pending_snapshot = 0;
            pr.become_probe();
            pr.next_idx = last + 1;
        }
        self.snapshots_out.remove(&id);
    }

    /// This replica was rebuilt after it lost its data, and a peer's log
    /// reached `index` then. Entries up to there may have been committed
    /// with acknowledgements the lost data held, so some may now be held by
    /// fewer than a majority: until this replica's commit index reaches
    /// `index` it does not campaign, and grants a vote (or pre-vote) only to
    /// a candidate whose log reaches `index` — else two replicas short of
    /// those entries could elect one of them and overwrite them.
    pub fn catch_up_to(&mut self, index: u64) {
        self.catch_up_to = self.catch_up_to.max(index);
    }

    /// Still catching up (see [`Cab::catch_up_to`]).
    pub fn catching_up(&self) -> bool {
        self.node.raft.raft_log.committed < self.catch_up_to
    }

    /// Leader: a snapshot the library started sending a follower and that
    /// was not installed within [`SNAPSHOT_RETRY_TICKS`] is reported failed,
    /// so the library sends one again (at the log's base now).
    pub(crate) fn retry_snapshots(&mut self) {
        if !self.is_leader() {
            self.snapshots_out.clear();
            return;
        }
        let now = self.raft_ticks;
        let sending: Vec<u64> = self
            .node
            .raft
            .prs()
            .iter()
            .filter(|(_, pr)| pr.state == raft::ProgressState::Snapshot)
            .map(|(id, _)| *id)
            .collect();
        self.snapshots_out.retain(|id, _| sending.contains(id));
        for id in sending {
            let since = *self.snapshots_out.entry(id).or_insert(now);
            if now - since >= SNAPSHOT_RETRY_TICKS {
                self.snapshots_out.remove(&id);
                self.node.report_snapshot(id, raft::SnapshotStatus::Failure);
            }
        }
    }

    /// The library installs a snapshot: the log becomes empty at its index,
    /// and delivery continues after it (the caller's state covers it).
    pub(crate) fn applied_snapshot(
        &mut self,
        snap: &raft::eraftpb::Snapshot,
    ) -> Result<(), String> {
        let index = snap.get_metadata().index;
        self.node
            .mut_store()
            .apply_snapshot(snap)
            .map_err(|e| e.to_string())?;
        let conf = self.node.store().conf();
        self.group = members_of(&conf.state);
        self.conf_out.push(ConfApplied {
            index: conf.index,
            change: None,
            conf: conf.state,
            context: Bytes::new(),
        });
        self.decided.clear();
        self.handed = 0;
        self.seen.clear();
        self.decided_through = self.decided_through.max(index);
        self.delivered_index = self.delivered_index.max(index);
        self.compactable = self.compactable.max(index);
        Ok(())
    }
}
