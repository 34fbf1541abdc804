//! Conditional delivery: committed entries put their ids, at their first
//! occurrence, in the decided queue; [`Cab::ready`] hands them to the
//! replica in log order, which delivers each once its *deps* holds, and
//! [`Cab::advance`] takes the delivered ones off the queue. Also what CAB
//! waits on, and the log not yet decided (the leader's optimistic order).

use creek_core::OpId;
use creek_types::planted::Bug;
use raft::eraftpb::EntryType;

use crate::messages::first_unheld;
use crate::{entry, Cab, CabReady, CabStorage, Deps};

impl<S: CabStorage> Cab<S> {
    /// Committed entries, in log order: their ids join the decided queue at
    /// their first occurrence.
    pub(crate) fn decide(&mut self, entries: Vec<raft::eraftpb::Entry>) {
        for e in entries {
            // Paired with the library's contract (and with the delivery
            // order asserted in `advance`): each committed entry
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

    /// Everything this node has for its caller after a turn, in the
    /// manner of raft-rs's `RawNode::ready()`: it first does all pending work
    /// (releases held appends whose payloads arrived, proposes held ids,
    /// forwards, runs the library's Ready loop), then hands over the
    /// messages, the configuration changes applied, and the decided ids not
    /// handed over before, in log order. The caller delivers those under
    /// its *deps* predicate, in that order (conditional delivery: an id
    /// waits, and every id after it, until *deps* holds), and reports with
    /// [`Cab::advance`] how many still wait.
    pub fn ready(&mut self, holds: Deps<'_>) -> CabReady {
        self.poll(holds);
        let decided = self
            .decided
            .iter()
            .skip(self.handed)
            .map(|(id, _)| *id)
            .collect();
        self.handed = self.decided.len();
        CabReady {
            early: std::mem::take(&mut self.early),
            messages: std::mem::take(&mut self.out),
            decided,
            conf_applied: std::mem::take(&mut self.conf_out),
        }
    }

    /// The caller delivered every decided id handed over but the last
    /// `waiting` (raft-rs's `advance_apply`): those leave the decided queue,
    /// and [`Cab::delivered_through`] moves past them.
    pub fn advance(&mut self, waiting: usize) {
        // Paired with `ready`: what waits is a suffix of what was handed
        // over (delivery follows the decided order).
        assert!(
            waiting <= self.handed,
            "{waiting} decided ids wait, of {} handed over",
            self.handed
        );
        while self.handed > waiting {
            let Some((id, index)) = self.decided.pop_front() else {
                break;
            };
            // Paired with `decide`: ids leave in the order they were decided.
            assert!(
                index >= self.delivered_index,
                "{id} of entry {index} delivered after entry {}",
                self.delivered_index
            );
            self.delivered_index = index;
            self.handed -= 1;
            self.stats.delivered += 1;
        }
    }

    /// The caller lost the decided ids it was handed and did not deliver
    /// (its state was replaced, by a checkpoint that may not cover them):
    /// the next [`Cab::ready`] hands them over again.
    pub fn hand_again(&mut self) {
        self.handed = 0;
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
