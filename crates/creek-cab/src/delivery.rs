//! Conditional delivery: committed entries put their ids, at their first
//! occurrence, in the decided queue; ids leave it strictly in log order,
//! each once the replica's *deps* holds. Also what CAB waits on, and the
//! log not yet decided (the leader's optimistic order).

use creek_core::OpId;
use creek_types::planted::Bug;
use raft::eraftpb::EntryType;

use crate::messages::first_unheld;
use crate::{entry, Cab, CabStorage, Deps};

impl<S: CabStorage> Cab<S> {
    /// Committed entries, in log order: their ids join the decided queue at
    /// their first occurrence.
    pub(crate) fn decide(&mut self, entries: Vec<raft::eraftpb::Entry>) {
        for e in entries {
            // Paired with the library's contract (and with the delivery
            // order asserted in `take_deliverable`): each committed entry
            // once, in log order, after the restart point.
            assert!(
                e.index > self.decided_through,
                "entry {} committed again or out of order (decided through {})",
                e.index,
                self.decided_through
            );
            self.decided_through = e.index;
            if e.get_entry_type() == EntryType::EntryConfChangeV2 {
                self.apply_conf_entry(&e);
                continue;
            }
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                continue;
            }
            // Malformed data decodes the same way everywhere: skipped.
            let Some(ids) = entry::decode_ids(&e.data) else {
                continue;
            };
            for id in ids {
                self.in_flight.remove(&id);
                self.unconfirmed.remove(&id);
                if self.seen.insert(id, e.index).is_none() {
                    self.stats.ids_decided += 1;
                    self.decided.push_back((id, e.index));
                } else {
                    self.stats.duplicates_decided += 1;
                }
            }
        }
    }

    /// Decided ids deliverable now: strictly in decision order, each once its
    /// predicate holds (conditional delivery). The predicate is asked about
    /// each id as things stand at the call: an id whose predicate only the
    /// delivery of an earlier one satisfies waits for the next call (see
    /// [`Cab::next_deliverable`]).
    pub fn take_deliverable(&mut self, deps: Deps<'_>) -> Vec<OpId> {
        std::iter::from_fn(|| self.next_deliverable(deps)).collect()
    }

    /// The next decided id, if its predicate holds. A caller that delivers
    /// each before asking again delivers a chain of ids that depend on one
    /// another in one go.
    pub fn next_deliverable(&mut self, deps: Deps<'_>) -> Option<OpId> {
        let &(id, index) = self.decided.front()?;
        if !deps(id) {
            return None;
        }
        // Paired with `decide`: ids leave in the order they were decided.
        assert!(
            index >= self.delivered_index,
            "{id} of entry {index} delivered after entry {}",
            self.delivered_index
        );
        self.delivered_index = index;
        self.decided.pop_front();
        self.stats.delivered += 1;
        Some(id)
    }

    /// Ids CAB waits on: those of the first held append and the pending
    /// proposals that `holds` rejects, and the next decided id if `deps`
    /// rejects it. The caller should fetch their payloads and causal contexts
    /// by gossip.
    pub fn waiting_for(&self, holds: Deps<'_>, deps: Deps<'_>) -> Vec<OpId> {
        let mut ids: Vec<OpId> = Vec::new();
        // Of the first held append, the entry that waits: its first, once
        // a poll split off the entries before it (see `release_held`).
        if let Some(m) = self.held.front() {
            let waits = match self.held_blocker {
                Some(_) => Some(0),
                None => first_unheld(m, holds).map(|(n, _)| n),
            };
            if let Some(entry) = waits.and_then(|n| m.get_entries().get(n)) {
                let batch = entry::decode_ids(&entry.data).unwrap_or_default();
                ids.extend(batch.into_iter().filter(|id| !holds(*id)));
            }
        }
        ids.extend(self.pending.iter().copied().filter(|id| !holds(*id)));
        ids.extend(
            self.decided
                .front()
                .map(|(id, _)| *id)
                .filter(|id| !deps(*id)),
        );
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The last log index all of whose ids have been delivered: what a
    /// restarted node passes as `applied` (a durable driver persists it with
    /// the state those deliveries produced).
    pub fn delivered_through(&self) -> u64 {
        match self.decided.front() {
            Some((_, index)) => index - 1,
            None => self.node.raft.raft_log.applied,
        }
    }

    /// The log index of the first decided id still waiting for its
    /// predicate (its payload or its causal context), if any.
    pub fn decided_from(&self) -> Option<u64> {
        self.decided.front().map(|(_, index)| *index)
    }

    /// Decided ids still waiting for their predicate.
    pub fn decided_waiting(&self) -> usize {
        self.decided.len()
    }

    /// The ids of this node's log entries past the commit index, in log
    /// order, each with its entry's index and its place in the entry: at the
    /// leader what it proposed, at a follower what the leader's appends
    /// brought. That is the leader's order before consensus ends: the
    /// optimistic delivery of an optimistic atomic broadcast (the Archie
    /// baseline). A later leader may overwrite any of it.
    pub fn undecided_log(&self) -> Vec<(u64, usize, OpId)> {
        let log = &self.node.raft.raft_log;
        let from = log.committed + 1;
        if from > log.last_index() {
            return Vec::new();
        }
        let Ok(entries) = log.entries(from, None, raft::GetEntriesContext::empty(false)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries {
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                continue;
            }
            if let Some(ids) = entry::decode_ids(&e.data) {
                out.extend(ids.into_iter().enumerate().map(|(k, id)| (e.index, k, id)));
            }
        }
        out
    }

    /// Check CAB's invariants (for the simulator's sampled checks):
    /// delivery never passes the commit index, the decided queue is in log
    /// order within what was decided, and every queued id is seen.
    pub fn check_invariants(&self) -> Result<(), String> {
        let committed = self.node.raft.raft_log.committed;
        let through = self.delivered_through();
        if through > committed && !self.config.planted.has(Bug::StableBeforeDurable) {
            return Err(format!(
                "delivered through {through}, past the commit index {committed}"
            ));
        }
        let mut last = self.delivered_index;
        for &(id, index) in &self.decided {
            if index < last {
                return Err(format!("decided queue out of log order at {id}"));
            }
            last = index;
            if !self.seen.contains_key(&id) {
                return Err(format!("decided {id} is not among the seen ids"));
            }
        }
        Ok(())
    }
}
