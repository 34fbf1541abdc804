//! Messages in and out: which peer may speak, the consensus messages that
//! are refused, held (a snapshot the caller's state must cover first) or
//! stepped into the library; appends held back until the replica holds
//! every id in them (no loss); and the two outgoing queues, early and held
//! for this node's writes.

use bytes::Bytes;
use creek_core::{OpId, ReplicaId};
use creek_wire::CabMessage;
use protobuf::Message as _;
use raft::eraftpb::{EntryType, Message, MessageType};

use crate::{entry, raft_id, replica_of, Cab, CabStorage, Deps};

impl<S: CabStorage> Cab<S> {
    /// A CAB message from peer `from`; `holds` decides whether an append can
    /// be accepted now.
    pub fn on_message(&mut self, from: ReplicaId, msg: CabMessage, holds: Deps<'_>) {
        if self.failed.is_some() {
            return;
        }
        // Every CAB message comes from another member of the applied
        // configuration: from anyone else (or in this replica's own name) it
        // is refused, so no peer outside the group can get an id ordered (a
        // weak op's, or one no replica holds, which would block every later
        // delivery), announce compaction or speak Raft here.
        if from == self.config.me || !self.group.contains(&from) {
            self.stats.refused += 1;
            return;
        }
        match msg {
            CabMessage::Forward { ids } => {
                if self.is_leader() {
                    for id in ids {
                        self.route(id);
                    }
                } else if self
                    .leader()
                    .is_some_and(|l| l != from && l != self.config.me)
                {
                    self.to_forward.extend(ids);
                }
            }
            CabMessage::Compact { through } => {
                // A later announcement may be lower (a new leader's progress
                // starts over): keep the max.
                self.compactable = self.compactable.max(through);
            }
            CabMessage::Raft(bytes) => {
                let Ok(m) = Message::parse_from_bytes(&bytes) else {
                    self.stats.refused += 1;
                    return;
                };
                let addressed = m.to == raft_id(self.config.me) && m.from == raft_id(from);
                if !addressed {
                    self.stats.refused += 1;
                    return;
                }
                if m.get_msg_type() == MessageType::MsgSnapshot && self.needs_state(&m) {
                    // Held until the caller's state covers it (a newer
                    // snapshot replaces it).
                    self.held_snapshot = Some((from, m));
                    return;
                }
                if self.stale_reject(&m) {
                    return;
                }
                if matches!(
                    m.get_msg_type(),
                    MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                ) && self.catching_up()
                    && m.index < self.catch_up_to
                {
                    // No answer: the candidate may lack entries this
                    // replica lost (see `catch_up_to`).
                    self.stats.refused += 1;
                    return;
                }
                if let Some(why) = self.lost_acknowledged(from, &m) {
                    self.stats.refused += 1;
                    self.failed = Some(why);
                    return;
                }
                // An append of a term past here (`m.term < term` would be
                // refused by the library anyway) is never held: see
                // `drop_stale_held`.
                if m.get_msg_type() == MessageType::MsgAppend
                    && m.term >= self.node.raft.term
                    && (!self.held.is_empty() || first_unheld(&m, holds).is_some())
                {
                    if self.held.len() < self.config.held_appends_max {
                        self.stats.appends_held += 1;
                        self.held.push_back(m);
                    } else {
                        self.stats.appends_dropped += 1;
                    }
                    return;
                }
                if self.node.step(m).is_err() {
                    self.stats.refused += 1;
                }
            }
        }
    }

    /// Whether the library would install snapshot `m` (rather than ignore it
    /// as stale or fast-forward to it within this log): then the caller's
    /// state must cover its index first.
    fn needs_state(&self, m: &Message) -> bool {
        let raft = &self.node.raft;
        let meta = m.get_snapshot().get_metadata();
        m.term >= raft.term
            && meta.index > raft.raft_log.committed
            && !raft.raft_log.match_term(meta.index, meta.term)
    }

    /// Whether `m` is a rejected append that the leader already knows to be
    /// stale: the follower has since acknowledged entries through at least
    /// the rejected index (its `matched` progress). raft-rs (0.7) steps such
    /// a late rejection in probe state by moving the follower's next index
    /// back below what it acknowledged (etcd's raft keeps it above `matched`),
    /// and with a compacted log that index may be gone: the library would
    /// then ask for a snapshot, which CAB never sends. The rejection carries
    /// nothing the acknowledgement did not supersede, so it is dropped.
    fn stale_reject(&self, m: &Message) -> bool {
        m.get_msg_type() == MessageType::MsgAppendResponse
            && m.reject
            && self.is_leader()
            && m.term == self.node.raft.term
            && self
                .node
                .raft
                .prs()
                .get(m.from)
                .is_some_and(|pr| pr.matched >= m.index)
    }

    /// Whether `m` is a heartbeat whose commit index lies past the end of
    /// this log, which the library would take with a panic (`commit_to`).
    /// The leader sends the lesser of its commit index and what this replica
    /// acknowledged, and this replica acknowledges entries only once they
    /// are durable, so it lost entries it acknowledged (its data directory
    /// was lost or damaged): it must stop rather than rejoin as if it held
    /// them. Only heartbeats the library would act on count (a stale term's
    /// are ignored; term 0 is taken as local). An append cannot trip this:
    /// the library commits at most through the append's last entry, which
    /// the log holds once it accepts the append, and an append starting
    /// below the commit index is answered without committing.
    fn lost_acknowledged(&self, from: ReplicaId, m: &Message) -> Option<String> {
        let raft = &self.node.raft;
        let last = raft.raft_log.last_index();
        let acted_on = m.term == 0 || m.term >= raft.term;
        if m.get_msg_type() != MessageType::MsgHeartbeat || !acted_on || m.commit <= last {
            return None;
        }
        Some(format!(
            "the leader (replica {}) says entries up to index {} are committed here, but this \
             replica's log ends at {last}: this replica lost data it acknowledged (its data \
             directory was lost or damaged); it must not rejoin with this log",
            from.0, m.commit
        ))
    }

    /// Step the held appends whose entries the caller now holds, in order,
    /// then the held leading entries of the first that waits. An op named
    /// after a void op (see `creek_procs::void`) may name voided ids in its
    /// context, which only that void op, earlier in the log, makes held
    /// here: a follower that had to take both in one append would wait
    /// forever.
    pub(crate) fn release_held(&mut self, holds: Deps<'_>) {
        self.drop_stale_held();
        while self.held_blocker.is_none_or(holds) {
            let Some(m) = self.held.front_mut() else {
                self.held_blocker = None;
                return;
            };
            let step = match first_unheld(m, holds) {
                None => {
                    self.held_blocker = None;
                    self.held.pop_front()
                }
                Some((n, id)) => {
                    self.held_blocker = Some(id);
                    (n > 0).then(|| split_append(m, n))
                }
            };
            if let Some(m) = step {
                if self.node.step(m).is_err() {
                    self.stats.refused += 1;
                }
            }
            if self.held_blocker.is_some() {
                return;
            }
        }
    }

    /// Drop the held appends of a term below this node's. Their leader was
    /// deposed: the library would refuse them (raft ignores a message of a
    /// past term), and this node never acknowledged them, so dropping them
    /// is a lost message, which Raft tolerates. Holding them instead wedges
    /// the follower: appends are stepped in arrival order, so every append
    /// of the current leader waits behind the first held one, and the ids
    /// an old leader proposed may never be held anywhere again — a leader
    /// that lost its disk took with it the payloads of its ops that no peer
    /// had received yet, and its later strong ops, whose causal contexts
    /// name them, wait until the rebuilt replica's `creek.ops.void` commits,
    /// which needs the current leader's appends taken first (3 replicas,
    /// kv, seed 200493: `r1.267` held at index 262 for lost `r1.265`).
    fn drop_stale_held(&mut self) {
        let term = self.node.raft.term;
        if self.held_term == term {
            return;
        }
        self.held_term = term;
        if !self.held.iter().any(|m| m.term < term) {
            return;
        }
        let before = self.held.len();
        self.held.retain(|m| m.term >= term);
        self.stats.stale_appends_dropped += (before - self.held.len()) as u64;
        // The blocker was the first held append's: ask again.
        self.held_blocker = None;
    }

    /// Appends held back for payloads.
    pub fn held_appends(&self) -> usize {
        self.held.len()
    }

    /// The log index of the first held entry (the one the held appends
    /// wait on), if any.
    pub fn held_from(&self) -> Option<u64> {
        let m = self.held.front()?;
        Some(m.get_entries().first().map_or(m.index + 1, |e| e.index))
    }

    /// The replica that sent the first held append: a leader of its term,
    /// and so a member that holds the entries (and can serve a checkpoint
    /// covering them) even when this replica no longer knows who leads.
    pub fn held_sender(&self) -> Option<ReplicaId> {
        replica_of(self.held.front()?.from)
    }

    /// Encode the library's messages for sending: `early` ones may leave
    /// before this node's pending writes are durable.
    pub(crate) fn send(&mut self, msgs: Vec<Message>, early: bool) {
        let catching_up = self.catching_up();
        for m in msgs {
            if catching_up
                && matches!(
                    m.get_msg_type(),
                    MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                )
            {
                // No campaign while short of what a peer held at the
                // rebuild (see `catch_up_to`): its candidacy goes nowhere.
                continue;
            }
            let Some(to) = replica_of(m.to) else {
                continue;
            };
            let Ok(bytes) = m.write_to_bytes() else {
                continue;
            };
            self.stats.raft_msgs_sent += 1;
            self.stats.raft_bytes_sent += bytes.len() as u64;
            let out = if early {
                &mut self.early
            } else {
                &mut self.out
            };
            out.push((to, CabMessage::Raft(Bytes::from(bytes))));
        }
    }
}

/// The position in append `m` of the first entry naming an id this replica
/// does not hold, with that id; `None` if it holds them all.
pub(crate) fn first_unheld(m: &Message, holds: Deps<'_>) -> Option<(usize, OpId)> {
    m.get_entries().iter().enumerate().find_map(|(n, e)| {
        if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
            return None;
        }
        let ids = entry::decode_ids(&e.data)?;
        ids.into_iter().find(|id| !holds(*id)).map(|id| (n, id))
    })
}

/// Split held append `m` after its first `n` entries: returns an append of
/// those (to step now), and leaves `m` with the rest, continuing from the
/// last of them.
fn split_append(m: &mut Message, n: usize) -> Message {
    let mut entries = m.take_entries().into_vec();
    let rest = entries.split_off(n);
    let mut prefix = m.clone();
    if let Some(last) = entries.last() {
        m.index = last.index;
        m.log_term = last.term;
    }
    prefix.set_entries(entries.into());
    m.set_entries(rest.into());
    prefix
}
