//! Who is in the replica group: the consensus configuration (voters and
//! learners) and how to reach each member.
//!
//! The group changes through configuration changes ordered by consensus
//! (`creek-cab`); every replica applies them at the same log indexes, so at
//! any point of the log every replica agrees on the group. A checkpoint
//! records the group as of the change it last reflects ([`Group::conf_index`]),
//! so a replica rebuilt from it knows its peers and their addresses.
//!
//! Replica ids only grow: a new replica gets an id above every id the group
//! ever had ([`Directory::max_id`]), so a removed id never returns and its
//! old ops, causal contexts and version vectors can never be confused with
//! a newcomer's.

use std::collections::BTreeMap;

use crate::ReplicaId;

/// How to reach a member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addrs {
    /// Its peer address (`host:port`).
    pub peer: String,
    /// Its client address (`host:port`).
    pub client: String,
}

/// The addresses of the members that joined after the group was formed
/// (the initial members' addresses are in every replica's configuration),
/// and the highest id ever admitted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directory {
    /// Addresses of members added by a configuration change.
    pub addrs: BTreeMap<ReplicaId, Addrs>,
    /// The highest replica id the group ever had (0: only the initial
    /// members, whose highest id the configuration gives).
    pub max_id: u16,
}

/// The group at one point of the consensus log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    /// The log index of the last configuration change this reflects (0:
    /// the initial group).
    pub conf_index: u64,
    /// Voters (the incoming half while joint).
    pub voters: Vec<ReplicaId>,
    /// While joint: the outgoing voters.
    pub voters_outgoing: Vec<ReplicaId>,
    /// Learners: receive the log, do not vote.
    pub learners: Vec<ReplicaId>,
    /// While joint: voters that become learners when the joint
    /// configuration is left.
    pub learners_next: Vec<ReplicaId>,
    /// While joint: the leader leaves the joint configuration by itself.
    pub auto_leave: bool,
    /// Addresses and the highest id.
    pub directory: Directory,
}

impl Group {
    /// Whether this records no configuration (a checkpoint written before
    /// groups were recorded).
    pub fn is_unknown(&self) -> bool {
        self.voters.is_empty()
    }

    /// Every member: voters (both halves) and learners, sorted.
    pub fn members(&self) -> Vec<ReplicaId> {
        let mut all: Vec<ReplicaId> = self
            .voters
            .iter()
            .chain(&self.voters_outgoing)
            .chain(&self.learners)
            .chain(&self.learners_next)
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Whether `r` votes (in either half while joint).
    pub fn is_voter(&self, r: ReplicaId) -> bool {
        self.voters.contains(&r) || self.voters_outgoing.contains(&r)
    }
}
