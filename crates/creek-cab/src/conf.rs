//! Changing the group: learners, promotions and removals through the
//! library's configuration changes (`ConfChangeV2`).
//!
//! A change is a log entry like any other: the leader proposes it, and every
//! node applies it when the entry is committed ([`Cab::decide`] calls
//! [`Cab::apply_conf_entry`]), in log order, so every node moves through the
//! same configurations at the same indexes. Voter changes go through joint
//! consensus (the library's implicit transition: it enters the joint
//! configuration, and its leader leaves it by itself once that is
//! committed); adding or removing a learner is a simple change.
//!
//! The stored configuration is the latest applied, with the index of its
//! last change ([`Conf`]). A node restarted from a checkpoint, or installing
//! a snapshot, may be handed entries again that its configuration already
//! reflects: an entry at or before [`Conf::index`] is never applied twice.
//!
//! A new replica joins as a learner (`MemberChange::AddLearner`): it
//! receives the log, or a snapshot and a checkpoint by state transfer, and
//! votes on nothing. Once its log is within [`PROMOTE_LAG`] entries of the
//! commit index, the leader promotes it to a voter by itself. A leader does not
//! propose its own removal: it hands leadership to the most caught-up voter
//! first ([`ChangeRefused::LeaderMustHandOver`] tells the caller so); a
//! leader under which an earlier leader's proposal to remove it commits
//! steps down.

use std::collections::BTreeSet;

use bytes::Bytes;
use creek_core::ReplicaId;
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, ConfState, Entry,
};

use crate::{raft_id, replica_of, Cab, CabStorage, Conf};

/// A learner is promoted once its log is within this many entries of the
/// leader's commit index.
pub const PROMOTE_LAG: u64 = 64;

/// A change of the group's membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberChange {
    /// A new replica joins as a learner: it receives the log but does not
    /// vote until promoted.
    AddLearner(ReplicaId),
    /// A learner becomes a voter (joint consensus).
    Promote(ReplicaId),
    /// A voter or learner leaves the group (joint consensus for a voter).
    Remove(ReplicaId),
}

impl MemberChange {
    /// The replica the change is about.
    pub fn replica(&self) -> ReplicaId {
        match *self {
            MemberChange::AddLearner(r) | MemberChange::Promote(r) | MemberChange::Remove(r) => r,
        }
    }
}

/// Why a change was not proposed. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangeRefused {
    /// Only the leader proposes changes.
    #[error("not the leader (the leader is {leader:?})")]
    NotLeader {
        /// The leader this node knows of.
        leader: Option<ReplicaId>,
    },
    /// A change is still being applied (or the group is still joint).
    #[error("another membership change is in progress; retry when it is done")]
    InProgress,
    /// The replica is already in the group.
    #[error("replica {0} is already a member")]
    AlreadyMember(ReplicaId),
    /// The replica is not in the group (or, to promote, not a learner).
    #[error("replica {0} is not a {1}")]
    NotA(ReplicaId, &'static str),
    /// Removing the last voter would leave no group.
    #[error("replica {0} is the last voter and cannot be removed")]
    LastVoter(ReplicaId),
    /// The leader cannot remove itself: it hands leadership over first
    /// (started), and the change is proposed again by the new leader.
    #[error("replica {0} is the leader: leadership is being handed over first; retry")]
    LeaderMustHandOver(ReplicaId),
}

/// A change applied at `index` (in log order): the group's new
/// configuration and the context the proposer attached (the node's record
/// of the replica: its addresses). An installed snapshot reports its
/// configuration too (no change, no context).
#[derive(Clone, Debug, PartialEq)]
pub struct ConfApplied {
    /// The change's log index.
    pub index: u64,
    /// What changed (`None` for the library's own leave-joint step, and
    /// for a snapshot's configuration).
    pub change: Option<MemberChange>,
    /// The configuration after it.
    pub conf: ConfState,
    /// The proposer's context.
    pub context: Bytes,
}

/// The replicas of a configuration: voters (both halves while joint) and
/// learners.
pub fn members_of(conf: &ConfState) -> BTreeSet<ReplicaId> {
    conf.voters
        .iter()
        .chain(&conf.voters_outgoing)
        .chain(&conf.learners)
        .chain(&conf.learners_next)
        .filter_map(|id| replica_of(*id))
        .collect()
}

/// The voters of a configuration (both halves while joint).
pub fn voters_of(conf: &ConfState) -> BTreeSet<ReplicaId> {
    conf.voters
        .iter()
        .chain(&conf.voters_outgoing)
        .filter_map(|id| replica_of(*id))
        .collect()
}

/// The voters of each half of a configuration: one set, or two while
/// joint. A decision by a majority needs a majority of each.
pub fn voter_halves(conf: &ConfState) -> Vec<BTreeSet<ReplicaId>> {
    let half = |ids: &[u64]| ids.iter().filter_map(|id| replica_of(*id)).collect();
    let mut halves = vec![half(&conf.voters)];
    if !conf.voters_outgoing.is_empty() {
        halves.push(half(&conf.voters_outgoing));
    }
    halves
}

fn single(r: ReplicaId, ty: ConfChangeType) -> ConfChangeSingle {
    let mut s = ConfChangeSingle::default();
    s.set_change_type(ty);
    s.node_id = raft_id(r);
    s
}

/// The library's change for `change`, given whether it touches a voter.
fn encode(change: MemberChange, voter: bool) -> ConfChangeV2 {
    let (ty, joint) = match change {
        MemberChange::AddLearner(_) => (ConfChangeType::AddLearnerNode, false),
        MemberChange::Promote(_) => (ConfChangeType::AddNode, true),
        MemberChange::Remove(_) => (ConfChangeType::RemoveNode, voter),
    };
    let mut cc = ConfChangeV2::default();
    cc.mut_changes().push(single(change.replica(), ty));
    cc.set_transition(if joint {
        ConfChangeTransition::Implicit
    } else {
        ConfChangeTransition::Auto
    });
    cc
}

/// What a committed change entry asks for (`None` for the leave-joint step
/// or a change this module does not propose).
fn decode(cc: &ConfChangeV2) -> Option<MemberChange> {
    let [s] = cc.changes.as_slice() else {
        return None;
    };
    let r = replica_of(s.node_id)?;
    Some(match s.get_change_type() {
        ConfChangeType::AddLearnerNode => MemberChange::AddLearner(r),
        ConfChangeType::AddNode => MemberChange::Promote(r),
        ConfChangeType::RemoveNode => MemberChange::Remove(r),
    })
}

impl<S: CabStorage> Cab<S> {
    /// The group's configuration as this node applies it.
    pub fn conf_state(&self) -> ConfState {
        self.node.raft.prs().conf().to_conf_state()
    }

    /// The replicas of the group (voters and learners), this one included if
    /// it is a member.
    pub fn members(&self) -> &BTreeSet<ReplicaId> {
        &self.group
    }

    /// Leader only: propose `change`, with `context` (recorded with the
    /// change and handed back in [`ConfApplied`]). It takes effect when
    /// committed; `CabReady::conf_applied` reports it.
    pub fn propose_change(
        &mut self,
        change: MemberChange,
        context: Bytes,
    ) -> Result<(), ChangeRefused> {
        if !self.is_leader() {
            return Err(ChangeRefused::NotLeader {
                leader: self.leader(),
            });
        }
        let conf = self.conf_state();
        if self.node.raft.has_pending_conf() || !conf.voters_outgoing.is_empty() {
            return Err(ChangeRefused::InProgress);
        }
        let r = change.replica();
        let voters = voters_of(&conf);
        let learner = conf.learners.contains(&raft_id(r));
        match change {
            MemberChange::AddLearner(_) if self.group.contains(&r) => {
                return Err(ChangeRefused::AlreadyMember(r));
            }
            MemberChange::Promote(_) if !learner => {
                return Err(ChangeRefused::NotA(r, "learner"));
            }
            MemberChange::Remove(_) if !self.group.contains(&r) => {
                return Err(ChangeRefused::NotA(r, "member"));
            }
            MemberChange::Remove(_) if voters.len() == 1 && voters.contains(&r) => {
                return Err(ChangeRefused::LastVoter(r));
            }
            MemberChange::Remove(_) if r == self.config.me => {
                self.hand_over();
                return Err(ChangeRefused::LeaderMustHandOver(r));
            }
            _ => {}
        }
        let cc = encode(change, voters.contains(&r));
        self.node
            .propose_conf_change(context.to_vec(), cc)
            .map_err(|_| ChangeRefused::InProgress)
    }

    /// Hand leadership to the voter whose log is furthest along, among
    /// those heard from lately (one that is down would never take it):
    /// before this replica leaves the group, or stops for a while. Returns
    /// the voter asked, if this replica leads and has one to ask; the
    /// library then stops proposing until the transfer ends (it is taken
    /// back after an election timeout if the voter does not take over).
    pub fn hand_over(&mut self) -> Option<ReplicaId> {
        if !self.is_leader() {
            return None;
        }
        let me = raft_id(self.config.me);
        let voters = voters_of(&self.conf_state());
        let best = self
            .node
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != me && replica_of(**id).is_some_and(|r| voters.contains(&r)))
            .max_by_key(|(id, pr)| (pr.recent_active, pr.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id);
        let to = best?;
        self.node.transfer_leader(to);
        replica_of(to)
    }

    /// Leader: promote one learner whose log has caught up (one change at a
    /// time; the next waits for this one).
    pub(crate) fn promote_caught_up(&mut self) {
        if !self.is_leader() || self.node.raft.has_pending_conf() {
            return;
        }
        let conf = self.conf_state();
        if !conf.voters_outgoing.is_empty() {
            return;
        }
        let committed = self.node.raft.raft_log.committed;
        let ready = conf.learners.iter().copied().find(|id| {
            self.node
                .raft
                .prs()
                .get(*id)
                .is_some_and(|pr| pr.matched > 0 && pr.matched + PROMOTE_LAG >= committed)
        });
        if let Some(r) = ready.and_then(replica_of) {
            // Refused only if something changed meanwhile: tried again.
            let _ = self.propose_change(MemberChange::Promote(r), Bytes::new());
        }
    }

    /// A committed configuration-change entry: applied once (entries the
    /// stored configuration already reflects are skipped), persisted, and
    /// reported.
    pub(crate) fn apply_conf_entry(&mut self, e: &Entry) {
        if e.index <= self.node.store().conf().index {
            return;
        }
        // Malformed data decodes the same way everywhere: skipped.
        let Ok(cc) = ConfChangeV2::parse_from_bytes(&e.data) else {
            self.stats.refused += 1;
            return;
        };
        let conf = match self.node.apply_conf_change(&cc) {
            Ok(conf) => conf,
            Err(_) => {
                // Refused by the library identically on every node (the same
                // change on the same configuration).
                self.stats.refused += 1;
                return;
            }
        };
        let stored = Conf {
            state: conf.clone(),
            index: e.index,
        };
        if let Err(why) = self.node.mut_store().set_conf(stored) {
            self.failed = Some(format!("storage failed, CAB stopped: {why}"));
            return;
        }
        if self.is_leader() && !voters_of(&conf).contains(&self.config.me) {
            // A leader that is no longer a voter (its removal, proposed by
            // an earlier leader, committed under it) steps down: the library
            // leaves that to its user, and a leader outside its own progress
            // set would fail. The voters left elect a new one.
            let term = self.node.raft.term;
            self.node.raft.become_follower(term, raft::INVALID_ID);
        }
        self.group = members_of(&conf);
        self.conf_out.push(ConfApplied {
            index: e.index,
            change: decode(&cc).filter(|_| !cc.leave_joint()),
            conf,
            context: e.context.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_round_trips_through_the_library_form() {
        for change in [
            MemberChange::AddLearner(ReplicaId(4)),
            MemberChange::Promote(ReplicaId(4)),
            MemberChange::Remove(ReplicaId(2)),
        ] {
            assert_eq!(decode(&encode(change, true)), Some(change));
        }
        assert_eq!(
            encode(MemberChange::Promote(ReplicaId(4)), true).enter_joint(),
            Some(true)
        );
        assert_eq!(
            encode(MemberChange::AddLearner(ReplicaId(4)), false).enter_joint(),
            None
        );
    }
}
