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
    /// acknowledged (and at most the commit index). Announced to every peer
    /// when it moves, and again every [`ANNOUNCE_TICKS`] ticks for peers
    /// that restarted and forgot it.
    pub(crate) fn announce_compaction(&mut self) {
        if !self.is_leader() {
            return;
        }
        let raft = &self.node.raft;
        let commit = raft.raft_log.committed;
        let lag = self.config.compaction_lag_max;
        let matched = raft
            .prs()
            .iter()
            .map(|(_, pr)| pr.matched)
            .filter(|m| m.saturating_add(lag) >= commit)
            .min();
        let point = matched.unwrap_or(0).min(commit);
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
