//! The replica group as consensus changes it: the node's side of CAB's
//! configuration changes (`creek_cab::MemberChange`).
//!
//! The leader proposes a change ([`Node::change_group`]); every node applies
//! it when its entry commits, at the same log index, and then re-aims
//! everything that names peers: gossip, link probes, state transfer and the
//! membership handshake. The addresses of members added after the group
//! formed travel in the change's context and are kept in the group's
//! [`Directory`] (persisted with the change, carried by checkpoints); the
//! driver learns of every change through [`Ready::group`](crate::Ready).
//!
//! Ids only grow: a replica is added under an id above every id the group
//! ever had, so a removed replica's id never returns.

use std::collections::BTreeSet;

use bytes::Bytes;
use creek_cab::ConfState;
use creek_cab::{voters_of, CabStorage, ChangeRefused, Conf, ConfApplied, MemberChange};
use creek_core::{Addrs, Directory, Group, ReplicaId};

use crate::Node;

/// Why a membership change was refused. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// The consensus layer refused it (not the leader, a change in
    /// progress, not a member, the last voter, the leader itself).
    #[error("{0}")]
    Refused(#[from] ChangeRefused),
    /// The id was used before (ids never return) or is reserved.
    #[error(
        "replica id {id} cannot be added: ids never return, so a new replica needs an id above \
         every id the group ever had (the highest is {max})"
    )]
    IdUsed {
        /// The id asked for.
        id: ReplicaId,
        /// The highest id the group ever had.
        max: u16,
    },
    /// A new replica needs its peer and client addresses.
    #[error("replica {0} needs a peer address and a client address")]
    NoAddress(ReplicaId),
    /// Proposed, but not applied within the time allowed (it may still be:
    /// check the members).
    #[error("the change ({0:?}) was proposed but not applied in time; check the members before retrying")]
    NotApplied(MemberChange),
    /// This replica does not take part (joining, lost or removed).
    #[error("replica {0} is not a member in good standing: ask another replica")]
    NotServing(ReplicaId),
}

fn ids(raft_ids: &[u64]) -> Vec<ReplicaId> {
    let mut out: Vec<ReplicaId> = raft_ids
        .iter()
        .filter_map(|id| id.checked_sub(1).and_then(|v| u16::try_from(v).ok()))
        .map(ReplicaId)
        .collect();
    out.sort_unstable();
    out
}

fn raft_ids(ids: &[ReplicaId]) -> Vec<u64> {
    ids.iter().map(|r| creek_cab::raft_id(*r)).collect()
}

/// The group of a consensus configuration.
pub(crate) fn group_of(conf: &Conf, directory: &Directory) -> Group {
    let s = &conf.state;
    Group {
        conf_index: conf.index,
        voters: ids(&s.voters),
        voters_outgoing: ids(&s.voters_outgoing),
        learners: ids(&s.learners),
        learners_next: ids(&s.learners_next),
        auto_leave: s.auto_leave,
        directory: directory.clone(),
    }
}

/// The consensus configuration of a group (a checkpoint's).
pub(crate) fn conf_of(group: &Group) -> Conf {
    let mut state = ConfState::default();
    state.set_voters(raft_ids(&group.voters));
    state.set_voters_outgoing(raft_ids(&group.voters_outgoing));
    state.set_learners(raft_ids(&group.learners));
    state.set_learners_next(raft_ids(&group.learners_next));
    state.auto_leave = group.auto_leave;
    Conf {
        state,
        index: group.conf_index,
    }
}

impl<S: CabStorage> Node<S> {
    /// The group as this node has applied it; while it is lost, the group
    /// a member named, if one did.
    pub fn group(&self) -> Group {
        match self.membership.followed_group() {
            Some((conf_index, members, voters)) => Group {
                conf_index,
                learners: members
                    .into_iter()
                    .filter(|r| !voters.contains(r))
                    .collect(),
                voters,
                directory: self.directory.clone(),
                ..Group::default()
            },
            None => group_of(&self.cab.store().conf(), &self.directory),
        }
    }

    /// Lost: a member named a newer group than this replica's configured
    /// one (`Membership::follow_group`). Take the addresses of members added
    /// since from the member's `directory`, and aim state transfer and the
    /// driver's connections at that group until the rebuild installs the
    /// group of the checkpoint it fetches.
    pub(crate) fn follow_group(&mut self, directory: &Directory) {
        let Some((_, members, _)) = self.membership.followed_group() else {
            return;
        };
        for (id, addrs) in &directory.addrs {
            if members.contains(id) {
                self.directory
                    .addrs
                    .entry(*id)
                    .or_insert_with(|| addrs.clone());
            }
        }
        self.directory.max_id = self.directory.max_id.max(directory.max_id);
        let me = self.id();
        let peers: Vec<ReplicaId> = members.into_iter().filter(|r| *r != me).collect();
        self.transfers.set_peers(&peers);
        self.group_changed = true;
    }

    /// The highest id the group ever had (a new replica needs a higher one).
    pub fn max_id(&self) -> u16 {
        let members = self.cab.members().iter().map(|r| r.0);
        let initial = self.initial_group.iter().map(|r| r.0);
        members
            .chain(initial)
            .chain([self.directory.max_id])
            .max()
            .unwrap_or(0)
    }

    /// Leader only: propose a change of the group. Adding a replica makes it
    /// a learner (`addrs` says how to reach it); the leader promotes it to a
    /// voter once it has caught up. Removing the leader itself starts a
    /// hand-over and is refused ([`ChangeRefused::LeaderMustHandOver`]):
    /// ask the new leader. `Ok` means proposed: the change takes effect when
    /// committed (see [`Node::group`]).
    pub fn change_group(
        &mut self,
        change: MemberChange,
        addrs: Option<Addrs>,
    ) -> Result<(), GroupError> {
        if !self.membership.is_member() {
            return Err(GroupError::NotServing(self.id()));
        }
        let mut context = Bytes::new();
        if let MemberChange::AddLearner(id) = change {
            let max = self.max_id();
            if id.0 <= max && !self.cab.members().contains(&id) {
                return Err(GroupError::IdUsed { id, max });
            }
            let addrs = addrs
                .filter(|a| !a.peer.is_empty() && !a.client.is_empty())
                .ok_or(GroupError::NoAddress(id))?;
            let entry = Directory {
                addrs: [(id, addrs)].into(),
                max_id: id.0,
            };
            context = Bytes::from(creek_wire::encode_directory(&entry));
        }
        self.cab.propose_change(change, context)?;
        self.turn();
        Ok(())
    }

    /// Take in the changes CAB applied: record new members' addresses,
    /// forget removed ones', and re-aim every room that names peers.
    pub(crate) fn apply_group_changes(&mut self, applied: Vec<ConfApplied>) {
        if applied.is_empty() {
            return;
        }
        for a in applied {
            match a.change {
                Some(MemberChange::AddLearner(id)) => {
                    // A context that does not decode (never proposed by a
                    // node) leaves the member without an address.
                    if let Ok(d) = creek_wire::decode_directory(&a.context) {
                        if let Some(addrs) = d.addrs.get(&id) {
                            self.directory.addrs.insert(id, addrs.clone());
                        }
                    }
                    self.directory.max_id = self.directory.max_id.max(id.0);
                }
                Some(MemberChange::Remove(id)) => {
                    self.directory.addrs.remove(&id);
                }
                Some(MemberChange::Promote(_)) | None => {}
            }
        }
        self.directory_changed = true;
        self.aim_at_group();
    }

    /// A checkpoint's group was installed with it: merge its directory into
    /// the one held (an id's addresses never change, since ids never return;
    /// either side may be the more recent), and re-aim.
    pub(crate) fn install_group(&mut self, group: &creek_core::Group) {
        if !group.is_unknown() {
            for (id, addrs) in &group.directory.addrs {
                self.directory
                    .addrs
                    .entry(*id)
                    .or_insert_with(|| addrs.clone());
            }
            self.directory.max_id = self.directory.max_id.max(group.directory.max_id);
            self.directory_changed = true;
        }
        self.aim_at_group();
    }

    /// Point gossip, link probes, state transfer and the handshake at the
    /// members of the applied configuration.
    pub(crate) fn aim_at_group(&mut self) {
        let me = self.id();
        let members: BTreeSet<ReplicaId> = self.cab.members().clone();
        if members.is_empty() {
            return;
        }
        let peers: Vec<ReplicaId> = members.iter().copied().filter(|r| *r != me).collect();
        let voters = voters_of(&self.cab.conf_state());
        self.gossip.set_peers(&peers);
        self.timing.set_peers(&peers);
        self.transfers.set_peers(&peers);
        self.membership.set_group(&members, voters);
        self.group_changed = true;
    }
}
