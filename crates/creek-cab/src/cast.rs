//! Casting from anywhere, and the leader's batching: an id cast here is
//! proposed by the leader, or forwarded to it (and forwarded again until
//! decided); the leader proposes the ids it holds in batches of
//! [`CabConfig::batch_ids_max`](crate::CabConfig::batch_ids_max), and
//! only while few entries are uncommitted.

use std::collections::VecDeque;

use creek_core::OpId;
use creek_types::planted::Bug;
use creek_wire::CabMessage;

use crate::{entry, Cab, CabStorage, Deps};

impl<S: CabStorage> Cab<S> {
    /// CAB-cast the id of a strong op invoked at this replica.
    pub fn cast(&mut self, id: OpId) {
        if self.seen.contains_key(&id) {
            return;
        }
        self.unconfirmed.insert(id, self.ticks);
        self.route(id);
    }

    /// Queue `id` for proposal here if leader, else for forwarding.
    pub(crate) fn route(&mut self, id: OpId) {
        if self.is_leader() {
            if !self.seen.contains_key(&id) && self.in_flight.insert(id) {
                self.pending.push_back(id);
            }
        } else {
            self.to_forward.push(id);
        }
    }

    /// Leader: propose the pending ids it holds, in batches.
    pub(crate) fn propose(&mut self, holds: Deps<'_>) {
        if !self.is_leader() || self.pending.is_empty() {
            return;
        }
        let log = &self.node.raft.raft_log;
        let uncommitted = log.last_index().saturating_sub(log.committed);
        if uncommitted >= self.config.uncommitted_entries_max {
            return; // proposed once an entry commits (poll runs again then)
        }
        let mut waiting = VecDeque::new();
        let mut batch = Vec::new();
        while let Some(id) = self.pending.pop_front() {
            if self.seen.contains_key(&id) {
                self.in_flight.remove(&id);
            } else if holds(id) {
                batch.push(id);
                if batch.len() == self.config.batch_ids_max {
                    self.propose_batch(std::mem::take(&mut batch));
                }
            } else {
                waiting.push_back(id);
            }
        }
        if !batch.is_empty() {
            self.propose_batch(batch);
        }
        self.pending = waiting;
    }

    fn propose_batch(&mut self, batch: Vec<OpId>) {
        match self.node.propose(vec![], entry::encode_ids(&batch)) {
            Ok(()) => {
                self.stats.entries_proposed += 1;
                self.stats.ids_proposed += batch.len() as u64;
                if self.config.planted.has(Bug::StableBeforeDurable) {
                    let index = self.node.raft.raft_log.last_index();
                    for id in batch {
                        if self.seen.insert(id, index).is_none() {
                            self.decided.push_back((id, index));
                        }
                    }
                }
            }
            // Not leader any more (or transferring): the casters retry.
            Err(_) => {
                for id in batch {
                    self.in_flight.remove(&id);
                }
            }
        }
    }

    pub(crate) fn forward(&mut self) {
        if self.to_forward.is_empty() {
            return;
        }
        if self.is_leader() {
            for id in std::mem::take(&mut self.to_forward) {
                self.route(id);
            }
            return;
        }
        let Some(leader) = self.leader() else {
            return; // kept until a leader is known
        };
        let mut ids = std::mem::take(&mut self.to_forward);
        ids.sort_unstable();
        ids.dedup();
        ids.retain(|id| !self.seen.contains_key(id));
        if !ids.is_empty() {
            self.stats.forwards_sent += 1;
            let out = if self.defers_writes() {
                &mut self.early
            } else {
                &mut self.out
            };
            out.push((leader, CabMessage::Forward { ids }));
        }
    }
}
