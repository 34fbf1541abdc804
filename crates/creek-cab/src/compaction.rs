//! Compaction without snapshots: the leader's compaction point (the least
//! index every replica acknowledged), announced to every peer, and the
//! compaction of this node's log to it (see the crate documentation).

use creek_wire::CabMessage;

use crate::{Cab, CabError, CabStorage};

/// A leader announces an unchanged compaction point again after this many
/// ticks, for peers that restarted and forgot it.
pub const ANNOUNCE_TICKS: u64 = 50;

impl<S: CabStorage> Cab<S> {
    /// Leader: the compaction point is the least index every replica has
    /// acknowledged (and at most the commit index), a follower being sent
    /// a snapshot counting at the snapshot's index (see [`compaction_point`]).
    /// Announced to every peer when it moves, and again every
    /// [`ANNOUNCE_TICKS`] ticks for peers that restarted and forgot it.
    pub(crate) fn announce_compaction(&mut self) {
        if !self.is_leader() {
            self.fetch_holds.clear();
            return;
        }
        let raft = &self.node.raft;
        let commit = raft.raft_log.committed;
        let lag = self.config.compaction_lag_max;
        for (id, pr) in raft.prs().iter() {
            if pr.state == raft::ProgressState::Snapshot && pr.pending_snapshot > 0 {
                self.fetch_holds.insert(*id, pr.pending_snapshot);
            }
        }
        // Until it caught up to the snapshot, or fell too far behind for
        // the hold (one down for good holds the log back only that far).
        // Not by `recent_active`: the library clears it at every quorum
        // check, before the follower's next answer.
        let reach = lag.saturating_mul(SNAPSHOT_HOLD);
        self.fetch_holds.retain(|id, index| {
            index.saturating_add(reach) >= commit
                && raft.prs().get(*id).is_some_and(|pr| pr.matched < *index)
        });
        let holds = &self.fetch_holds;
        let point = compaction_point(
            commit,
            lag,
            raft.prs().iter().map(|(id, pr)| Follower {
                matched: pr.matched,
                fetching: holds.get(id).copied(),
            }),
        );
        self.compactable = self.compactable.max(point);
        let (last, at) = self.announced;
        if point == 0 || (point == last && self.ticks - at < ANNOUNCE_TICKS) {
            return;
        }
        self.announced = (point, self.ticks);
        for &peer in &self.config.replicas {
            if peer != self.config.me {
                self.out
                    .push((peer, CabMessage::Compact { through: point }));
            }
        }
    }

    /// The compaction point (see the crate documentation): entries up to it
    /// are needed by no replica.
    pub fn compactable(&self) -> u64 {
        self.compactable
    }

    /// Compact the log through `through` — lowered to [`Cab::compactable`]
    /// and to what was delivered — and forget the ids decided there.
    /// `through` must be covered by the caller's latest checkpoint, handed to
    /// the driver no later than the log writes this produces, so a restart
    /// finds a checkpoint that covers the compacted log. Returns the log's
    /// new base index.
    pub fn compact(&mut self, through: u64) -> Result<u64, CabError> {
        let through = through.min(self.compactable).min(self.delivered_through());
        let store = self.node.mut_store();
        store
            .compact(through)
            .map_err(|e| CabError::Storage(e.to_string()))?;
        let base = store.first_index().map_err(CabError::from)? - 1;
        self.seen.retain(|_, index| *index > base);
        Ok(base)
    }
}

/// A replica's progress as the compaction point sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Follower {
    /// The last index it acknowledged.
    pub(crate) matched: u64,
    /// The index of the snapshot the leader sent it, until it caught up
    /// to it (it fetches the checkpoint that covers it).
    pub(crate) fetching: Option<u64>,
}

/// The compaction point: the least index of the replicas that keep up —
/// those at most `lag` entries behind `commit` (one down, or further
/// behind, is left to catch up by state transfer) — and at most `commit`.
///
/// A replica fetching a checkpoint for a snapshot counts at that
/// snapshot's index while it is at most [`SNAPSHOT_HOLD`] times `lag`
/// behind: compacting past it would make the leader send it a newer
/// snapshot, and a fetch still short of that index starts over, so under
/// steady writes a checkpoint larger than one compaction interval's worth
/// of transfer never arrives (chaos seed 106, docs/reliability.md). etcd
/// skips compaction while a snapshot is in flight for the same reason.
pub(crate) fn compaction_point(
    commit: u64,
    lag: u64,
    replicas: impl Iterator<Item = Follower>,
) -> u64 {
    replicas
        .filter_map(|f| match f.fetching {
            Some(index) if index.saturating_add(lag.saturating_mul(SNAPSHOT_HOLD)) >= commit => {
                Some(index)
            }
            _ => (f.matched.saturating_add(lag) >= commit).then_some(f.matched),
        })
        .min()
        .unwrap_or(0)
        .min(commit)
}

/// How far (in multiples of the compaction lag) a replica fetching a
/// checkpoint holds the compaction point back; past it, the log is
/// compacted anyway and the fetch starts over at a newer snapshot.
pub const SNAPSHOT_HOLD: u64 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn keeping_up(matched: u64) -> Follower {
        Follower {
            matched,
            fetching: None,
        }
    }

    #[test]
    fn the_point_is_the_least_index_of_the_replicas_keeping_up() {
        let all = [keeping_up(900), keeping_up(950), keeping_up(1000)];
        assert_eq!(compaction_point(1000, 100, all.into_iter()), 900);
        // One 500 behind with a lag of 100: left to state transfer.
        let all = [keeping_up(500), keeping_up(950), keeping_up(1000)];
        assert_eq!(compaction_point(1000, 100, all.into_iter()), 950);
    }

    #[test]
    fn a_replica_fetching_a_checkpoint_holds_the_point_at_its_snapshot() {
        let fetching = |index| Follower {
            matched: 10,
            fetching: Some(index),
        };
        // Being sent the snapshot at 700, 300 behind: held there, though
        // its acknowledgements are far behind.
        let all = [fetching(700), keeping_up(950), keeping_up(1000)];
        assert_eq!(compaction_point(1000, 100, all.into_iter()), 700);
        // Past SNAPSHOT_HOLD x lag behind: no longer held.
        let all = [fetching(500), keeping_up(950), keeping_up(1000)];
        assert_eq!(compaction_point(1000, 100, all.into_iter()), 950);
        // Caught up, or never sent one (`fetching: None`): as any replica.
        let all = [keeping_up(10), keeping_up(950), keeping_up(1000)];
        assert_eq!(compaction_point(1000, 100, all.into_iter()), 950);
    }
}
