//! The library's Ready loop: what it sends, what it persists, the ids it
//! decides; and, on a store that leaves durability to the driver, the log
//! writes handed out and the reports that they are durable.

use creek_core::OpId;
use raft::StateRole;

use crate::{Cab, CabStorage, LogWrites};

impl<S: CabStorage> Cab<S> {
    /// The library's Ready loop: send, persist, collect decided ids.
    pub(crate) fn handle_ready(&mut self) -> Result<(), String> {
        while self.node.has_ready() {
            let mut rd = self.node.ready();
            if let Some(ss) = rd.ss() {
                let leader = ss.raft_state == StateRole::Leader;
                if self.was_leader && !leader {
                    // Lost leadership: what was not proposed goes to the new
                    // leader; proposed-but-undecided ids are retried by their
                    // casters.
                    let pending: Vec<OpId> = self.pending.drain(..).collect();
                    self.in_flight.clear();
                    self.to_forward.extend(pending);
                }
                self.was_leader = leader;
            }
            let deferred = self.defers_writes();
            let now = rd.take_messages();
            self.send(now, deferred);
            let snapshot = !rd.snapshot().is_empty();
            if snapshot {
                self.applied_snapshot(rd.snapshot())?;
            }
            self.decide(rd.take_committed_entries());
            let store = self.node.mut_store();
            if !rd.entries().is_empty() {
                store.append(rd.entries()).map_err(|e| e.to_string())?;
            }
            if let Some(hs) = rd.hs() {
                store
                    .set_hard_state(hs.clone())
                    .map_err(|e| e.to_string())?;
            }
            self.send(rd.take_persisted_messages(), false);
            if deferred {
                // Persisted asynchronously: the driver makes these writes
                // durable, and `on_persisted` tells the library. A commit
                // index that moves arrives in a later Ready's hard state.
                let number = rd.number();
                self.written_ready = number;
                self.node.advance_append_async(rd);
                if snapshot {
                    // The library needs an installed snapshot applied at
                    // once (a campaign reads the log from the applied
                    // index on): counted persisted now, as on a synchronous
                    // store. Only delivery may run ahead of this disk —
                    // which a commit allows — and acknowledgements still
                    // wait for the write.
                    self.persisted_ready = number;
                    self.node.on_persist_ready(number);
                }
                self.apply_persisted();
            } else {
                let mut light = self.node.advance(rd);
                if let Some(commit) = light.commit_index() {
                    self.node
                        .mut_store()
                        .set_commit(commit)
                        .map_err(|e| e.to_string())?;
                }
                self.send(light.take_messages(), false);
                self.decide(light.take_committed_entries());
                self.node.advance_apply();
            }
        }
        Ok(())
    }

    /// Whether the store leaves durability to the driver
    /// ([`CabStorage::defers_writes`]): then the Ready loop persists
    /// asynchronously, and the driver reports durable writes with
    /// [`Cab::on_persisted`].
    pub(crate) fn defers_writes(&self) -> bool {
        self.node.store().defers_writes()
    }

    /// The log writes of the Ready rounds since the last call, for the
    /// node's next write (empty on a synchronous store), and the mark to
    /// report to [`Cab::on_persisted`] once that write is durable.
    pub fn take_writes(&mut self) -> (LogWrites, u64) {
        (self.node.mut_store().take_writes(), self.written_ready)
    }

    /// The writes taken with mark `mark` (see [`Cab::take_writes`]), and
    /// every earlier one, are durable: the library counts them (a leader
    /// counts itself toward commits from its log's end on, a follower
    /// delivers committed entries up to it). Poll afterwards.
    pub fn on_persisted(&mut self, mark: u64) {
        if mark > self.persisted_ready && self.failed.is_none() {
            self.persisted_ready = mark;
            self.node.on_persist_ready(mark);
            self.apply_persisted();
        }
    }

    /// Tell the library what is applied: every entry decided here, and a
    /// snapshot installed, once the library counts it persisted (a
    /// snapshot is applied with the write that stores it).
    fn apply_persisted(&mut self) {
        let log = &self.node.raft.raft_log;
        let to = self.decided_through.min(log.persisted);
        if to > log.applied {
            self.node.advance_apply_to(to);
        }
    }

    /// Whether the pending log writes must be durable before the output that
    /// follows them may leave (`CabStorage::must_sync`).
    pub fn must_sync(&self) -> bool {
        self.node.store().must_sync()
    }
}
