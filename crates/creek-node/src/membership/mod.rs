//! Who belongs to the cluster, and whether this replica still holds its
//! data.
//!
//! Raft's safety rests on a voter never forgetting what it acknowledged. A
//! replica whose data directory was lost and that comes back empty under its
//! old id would vote and acknowledge as if it had never acted: it can elect
//! a leader that lacks committed entries. A replica cannot tell on its own
//! whether an empty data directory is new or lost, so it asks its peers.
//!
//! # Identity
//!
//! A replica draws a random *nonce* when its data directory is created and
//! keeps it there ([`Identity`]). A cluster is named by its *founders*: the
//! `(replica, nonce)` of every initial member. An empty replica is
//! *joining*: it sends [`Hello`]s to its peers (they answer at once) and
//!
//! * when it has heard every peer joining too, the founders are everyone's
//!   nonces: it records them and becomes a *member*;
//! * when a member answers whose founders hold this replica's nonce, it is a
//!   founder that learnt late: it records them and becomes a member;
//! * when a member answers whose founders do not hold its nonce, the cluster
//!   exists without it — its data directory was lost: it is *lost*. A lost
//!   replica never votes, campaigns, acknowledges appends or serves views;
//!   it tells its peers it is lost (they refuse strong ops once a majority
//!   is) and is *rebuilt*: once every peer has said hello to it (so it
//!   knows the highest consensus term and the highest seq of its own ops
//!   that any peer holds), it fetches a member's checkpoint by state
//!   transfer (`transfer`), installs it, takes back its old nonce and is a
//!   member again — with a vote of its own recorded in that highest term,
//!   and its own seqs resuming past what any peer holds, so it neither
//!   votes twice in a term nor issues an id twice.
//!
//! So a new cluster forms once every initial member has started once with
//! an empty directory; the identity is persisted (and the hellos held)
//! before the replica acts on it, like every other write.
//!
//! # Changing the group
//!
//! The group changes through consensus (`creek-cab`'s configuration
//! changes); the node tells this state machine the members it applied
//! (`Membership::set_group`). A new replica starts with an empty data
//! directory, a configuration naming the current members, and an id the
//! group never had: to the members it looks like a replica that lost its
//! data (it is not among the founders), and it takes the same path — it
//! waits to hear every peer, installs a member's checkpoint, and is a
//! member, not a founder, from then on. Only voters count toward a quorum
//! that lost its data. A replica removed from the group stops serving
//! ([`Standing::Removed`]); members refuse its messages, and its id never
//! returns.
//!
//! A member refuses consensus and gossip messages from a peer whose hello
//! named other founders (a data directory of another cluster), and reports
//! it; a replica's hellos are the first frames it sends on every link (the
//! node puts them ahead of everything else), so on an ordered link nothing
//! of a foreign peer gets through before its hello. Messages from a lost
//! peer are refused too. A data directory written before identities existed
//! holds a member without founders: it accepts any member.

use std::collections::{BTreeMap, BTreeSet};

use creek_core::{Directory, ReplicaId};
use creek_wire::{Hello, MemberState};

/// A joining replica hellos its peers every this many ticks; a member hellos
/// peers it has not heard from every this many ticks too, and every other
/// peer every [`HELLO_MEMBER_TICKS`].
const HELLO_RETRY_TICKS: u64 = 10;

/// A member's hello to a peer it already knows, every this many ticks (so a
/// peer that restarts lost is noticed).
const HELLO_MEMBER_TICKS: u64 = 100;

/// What a data directory records about its replica's place in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Drawn when the data directory was created.
    pub nonce: u64,
    /// The cluster's founders, sorted by replica: `None` while joining;
    /// `Some(empty)` for a data directory written before identities existed.
    pub founders: Option<Vec<(ReplicaId, u64)>>,
    /// After a rebuild from a peer's checkpoint: the last seq of this
    /// replica's own ops from before it lost its data, which it takes back
    /// from its peers (0: never rebuilt).
    pub floor: u64,
    /// After a rebuild: the longest consensus log a peer reported then.
    /// Until its commit index reaches it, the replica neither campaigns
    /// nor votes for a candidate whose log is shorter (0: no such limit).
    pub catch_up_to: u64,
}

impl Identity {
    /// A new data directory's identity.
    pub fn joining(nonce: u64) -> Self {
        Identity {
            nonce,
            founders: None,
            floor: 0,
            catch_up_to: 0,
        }
    }

    /// A member of a group formed in memory (tests, the in-memory network):
    /// every replica's nonce is 0.
    pub fn founding(group: &[ReplicaId]) -> Self {
        let mut founders: Vec<(ReplicaId, u64)> = group.iter().map(|r| (*r, 0)).collect();
        founders.sort_unstable();
        Identity {
            nonce: 0,
            founders: Some(founders),
            floor: 0,
            catch_up_to: 0,
        }
    }

    /// The cluster's id: a hash of its founders (0 while joining or for a
    /// data directory without founders).
    pub fn cluster_id(&self) -> u64 {
        match &self.founders {
            Some(f) if !f.is_empty() => cluster_id(f),
            _ => 0,
        }
    }
}

/// FNV-1a over the founders: stable across builds and platforms.
fn cluster_id(founders: &[(ReplicaId, u64)]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (r, n) in founders {
        for b in r.0.to_le_bytes().into_iter().chain(n.to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// What a lost replica learnt from its peers before it is rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RebuildMarks {
    /// The highest consensus term any peer reported.
    pub(crate) term: u64,
    /// The highest seq of this replica's own ops any peer holds.
    pub(crate) own_seq: u64,
    /// The highest own seq this replica announced reserved that any peer
    /// heard (it issued none past it).
    pub(crate) own_reserved: u64,
    /// The longest consensus log any peer reported.
    pub(crate) last_index: u64,
    /// A member to fetch a checkpoint from.
    pub(crate) source: ReplicaId,
}

/// Where this replica stands, for status and errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Waiting to hear that every initial member started, or from a member.
    Joining {
        /// Peers not heard from yet.
        waiting_for: Vec<ReplicaId>,
    },
    /// A member holding its data.
    Member,
    /// Its data directory was lost (or it is a new replica joining a
    /// running group): it takes no part until rebuilt.
    Lost {
        /// Why it knows (which member said the cluster exists).
        why: String,
    },
    /// Removed from the group by a configuration change: it takes no part
    /// any more.
    Removed,
}

/// The membership state machine of one node.
#[derive(Debug)]
pub(crate) struct Membership {
    me: ReplicaId,
    peers: Vec<ReplicaId>,
    /// The voters of the group (this replica included if it votes): what a
    /// quorum is counted over.
    voters: BTreeSet<ReplicaId>,
    /// Removed from the group.
    removed: bool,
    identity: Identity,
    lost: Option<String>,
    /// Nonces of peers heard joining.
    joining_peers: BTreeMap<ReplicaId, u64>,
    /// Members whose founders match ours.
    verified: BTreeSet<ReplicaId>,
    /// Peers that said they are lost.
    lost_peers: BTreeSet<ReplicaId>,
    /// Peers of another cluster, with what they said.
    foreign: BTreeMap<ReplicaId, String>,
    /// The identity changed and must be written.
    dirty: bool,
    ticks: u64,
    /// Planted bug (`amnesiac-voter`): a lost replica joins anyway.
    rejoin_when_lost: bool,
    /// Rebuild even while a majority of the group holds no data (the
    /// operator's choice: see `NodeConfig::rebuild_despite_data_loss`).
    pub(crate) rebuild_despite_data_loss: bool,
    /// Lost: the founders the members named, and the members heard.
    lost_founders: Vec<(ReplicaId, u64)>,
    lost_sources: BTreeSet<ReplicaId>,
    /// Lost: per peer, the consensus term, the highest seq of this
    /// replica's ops, the last index of its consensus log and the highest
    /// own seq it heard this replica reserve, as reported in its latest
    /// hello.
    heard: BTreeMap<ReplicaId, (u64, u64, u64, u64)>,
    /// Per peer, the highest own seq it announced reserved (in memory: a
    /// best effort that covers a peer losing its disk while this replica
    /// runs; see `Hello::reserved`).
    reserved_heard: BTreeMap<ReplicaId, u64>,
    /// Lost: the configuration index of the latest group a member named
    /// (0: the configured group is all it knows).
    named_conf: u64,
    /// Hellos to send.
    outbox: Vec<(ReplicaId, Hello)>,
    /// What happened, for the driver's log (taken by `take_events`).
    events: Vec<Event>,
}

/// Something the driver should log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// This replica became a member (cluster id).
    Joined(u64),
    /// This replica learnt it lost its data.
    Lost(String),
    /// This new replica learnt its cluster exists and waits to install a
    /// member's checkpoint.
    Joining(String),
    /// A lost replica rejoined anyway (the planted bug `amnesiac-voter`).
    RejoinedDespiteLoss(String),
    /// A lost replica was rebuilt from a peer's checkpoint (cluster id).
    Rebuilt(u64),
    /// A new replica installed a member's checkpoint: it is a member
    /// (cluster id).
    Admitted(u64),
    /// This replica was removed from the group.
    Removed,
    /// A peer belongs to another cluster.
    Foreign(ReplicaId, String),
}

impl Membership {
    /// `identity` as stored; `dirty` when it must still be written (a new
    /// data directory's).
    pub(crate) fn new(
        me: ReplicaId,
        peers: Vec<ReplicaId>,
        identity: Identity,
        dirty: bool,
        rejoin_when_lost: bool,
    ) -> Self {
        let voters = peers.iter().copied().chain([me]).collect();
        let mut m = Membership {
            me,
            peers,
            voters,
            removed: false,
            identity,
            lost: None,
            joining_peers: BTreeMap::new(),
            verified: BTreeSet::new(),
            lost_peers: BTreeSet::new(),
            foreign: BTreeMap::new(),
            dirty,
            ticks: 0,
            rejoin_when_lost,
            rebuild_despite_data_loss: false,
            lost_founders: Vec::new(),
            lost_sources: BTreeSet::new(),
            heard: BTreeMap::new(),
            reserved_heard: BTreeMap::new(),
            named_conf: 0,
            outbox: Vec::new(),
            events: Vec::new(),
        };
        // A group of one needs nobody.
        m.try_found();
        if m.outbox.is_empty() {
            m.hello_all();
        }
        m
    }

    pub(crate) fn standing(&self) -> Standing {
        if self.removed {
            return Standing::Removed;
        }
        if let Some(why) = &self.lost {
            return Standing::Lost { why: why.clone() };
        }
        if self.identity.founders.is_some() {
            return Standing::Member;
        }
        Standing::Joining {
            waiting_for: self
                .peers
                .iter()
                .copied()
                .filter(|p| !self.joining_peers.contains_key(p))
                .collect(),
        }
    }

    /// A member holding its data: it takes part in consensus and gossip.
    pub(crate) fn is_member(&self) -> bool {
        !self.removed && self.lost.is_none() && self.identity.founders.is_some()
    }

    /// The group as consensus applied it: the other members (voters and
    /// learners) and the voters. A peer that left is forgotten; one that
    /// joined is greeted. Without this replica among the members, it was
    /// removed.
    pub(crate) fn set_group(&mut self, members: &BTreeSet<ReplicaId>, voters: BTreeSet<ReplicaId>) {
        let peers: Vec<ReplicaId> = members.iter().copied().filter(|r| *r != self.me).collect();
        let gone: Vec<ReplicaId> = self
            .peers
            .iter()
            .copied()
            .filter(|p| !peers.contains(p))
            .collect();
        for p in gone {
            self.verified.remove(&p);
            self.lost_peers.remove(&p);
            self.foreign.remove(&p);
            self.joining_peers.remove(&p);
            self.heard.remove(&p);
            self.reserved_heard.remove(&p);
            self.lost_sources.remove(&p);
        }
        let new: Vec<ReplicaId> = peers
            .iter()
            .copied()
            .filter(|p| !self.peers.contains(p))
            .collect();
        self.peers = peers;
        self.voters = voters;
        if !members.contains(&self.me) && self.is_member() {
            self.removed = true;
            self.events.push(Event::Removed);
        }
        for p in new {
            self.hello(p, false);
        }
    }

    /// Whether consensus and gossip messages from `peer` are accepted: this
    /// replica is a member and the peer is not known to be of another
    /// cluster or lost.
    ///
    /// A peer removed from the group is still accepted: its gossip hands
    /// over the ops it issued while a member (consensus checks the group
    /// itself, and a removed replica casts nothing).
    pub(crate) fn accepts(&self, peer: ReplicaId) -> bool {
        self.is_member() && !self.foreign.contains_key(&peer) && !self.lost_peers.contains(&peer)
    }

    /// Removed from the group, and `peer` is neither foreign nor lost: its
    /// digests and pulls are still answered, so the ops this replica issued
    /// while a member reach the group even when their eager push was lost
    /// (the group does not settle before it holds them).
    pub(crate) fn hands_over_to(&self, peer: ReplicaId) -> bool {
        self.removed && !self.foreign.contains_key(&peer) && !self.lost_peers.contains(&peer)
    }

    /// Removed from the group by a configuration change.
    pub(crate) fn is_removed(&self) -> bool {
        self.removed
    }

    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Peers known to have lost their data.
    pub(crate) fn lost_peers(&self) -> &BTreeSet<ReplicaId> {
        &self.lost_peers
    }

    /// Peers of another cluster.
    pub(crate) fn foreign_peers(&self) -> Vec<ReplicaId> {
        self.foreign.keys().copied().collect()
    }

    /// Lost, and every peer has said hello since: the highest consensus
    /// term and the highest seq of this replica's own ops any peer reported
    /// (a peer that holds no data reports zeros), and a member to fetch a
    /// checkpoint from.
    ///
    /// `None` too while the voters holding data (the peers that did not
    /// answer as lost or joining) do not meet every majority of the voters:
    /// then an entry or op acknowledged by a majority may be held by none of
    /// them, and rebuilding from them would hide that loss (the cluster
    /// refuses strong ops with "quorum lost data" instead). They meet every
    /// majority once at most half the voters lack data — for an odd group
    /// that is while a majority holds data, for an even one half suffices
    /// (one of two voters, two of four).
    pub(crate) fn rebuild_marks(&self) -> Option<RebuildMarks> {
        self.lost.as_ref()?;
        if self.peers.iter().any(|p| !self.heard.contains_key(p)) {
            return None;
        }
        // Over the voters: only they acknowledge (a learner, new or not yet
        // promoted, holds no acknowledgement a lost majority could take).
        let group = self.voters.len().max(1);
        let holding = self
            .lost_sources
            .iter()
            .filter(|p| self.voters.contains(p))
            .count();
        let empty = group.saturating_sub(holding);
        if !holders_meet_every_quorum(group, empty) && !self.rebuild_despite_data_loss {
            return None;
        }
        let source = *self.lost_sources.iter().next()?;
        Some(RebuildMarks {
            term: self.heard.values().map(|m| m.0).max().unwrap_or(0),
            own_seq: self.heard.values().map(|m| m.1).max().unwrap_or(0),
            last_index: self.heard.values().map(|m| m.2).max().unwrap_or(0),
            own_reserved: self.heard.values().map(|m| m.3).max().unwrap_or(0),
            source,
        })
    }

    /// The lost replica installed a member's checkpoint: it is a member
    /// again, under its old nonce (a data directory without founders keeps
    /// the new one), taking back its own ops up to `floor`.
    pub(crate) fn rebuilt(&mut self, floor: u64, catch_up_to: u64) {
        self.identity.floor = floor;
        self.identity.catch_up_to = catch_up_to;
        if self.lost.take().is_none() {
            return;
        }
        let founders = std::mem::take(&mut self.lost_founders);
        let founder = founders.iter().find(|(r, _)| *r == self.me).map(|f| f.1);
        if let Some(old) = founder {
            self.identity.nonce = old;
        }
        self.identity.founders = Some(founders);
        self.dirty = true;
        self.verified = std::mem::take(&mut self.lost_sources);
        self.heard.clear();
        let cluster = self.identity.cluster_id();
        self.events.push(if founder.is_some() {
            Event::Rebuilt(cluster)
        } else {
            Event::Admitted(cluster)
        });
        self.hello_all();
    }

    /// Whether the voters known to hold their data no longer meet every
    /// majority of the group (this replica counted if it lost its data).
    pub(crate) fn quorum_lost(&self) -> bool {
        let group = self.voters.len();
        let lost = self.lost_peers.intersection(&self.voters).count()
            + usize::from(self.lost.is_some() && self.voters.contains(&self.me));
        group > 0 && !holders_meet_every_quorum(group, lost)
    }

    /// The identity to write, if it changed since the last write.
    pub(crate) fn take_write(&mut self) -> Option<Identity> {
        std::mem::take(&mut self.dirty).then(|| self.identity.clone())
    }

    pub(crate) fn take_messages(&mut self) -> Vec<(ReplicaId, Hello)> {
        std::mem::take(&mut self.outbox)
    }

    pub(crate) fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    fn state(&self) -> MemberState {
        if self.lost.is_some() || self.removed {
            MemberState::Lost
        } else if self.identity.founders.is_some() {
            MemberState::Member
        } else {
            MemberState::Joining
        }
    }

    fn hello(&mut self, to: ReplicaId, reply: bool) {
        let founders = if self.is_member() {
            self.identity.founders.clone().unwrap_or_default()
        } else {
            Vec::new()
        };
        self.outbox.push((
            to,
            Hello {
                nonce: self.identity.nonce,
                state: self.state(),
                founders,
                reply,
                term: 0,
                peer_seq: 0,
                reserved: 0,
                peer_reserved: 0,
                floor: 0,
                last_index: 0,
                group: Vec::new(),
                voters: Vec::new(),
                conf_index: 0,
                directory: Directory::default(),
            },
        ));
    }

    /// The highest own seq `peer` announced reserved (0: none heard).
    pub(crate) fn reserved_by(&self, peer: ReplicaId) -> u64 {
        self.reserved_heard.get(&peer).copied().unwrap_or(0)
    }

    /// Hello every verified peer now (this replica reserved more seqs: the
    /// peers hear it before any op that uses them).
    pub(crate) fn announce(&mut self) {
        let verified: Vec<ReplicaId> = self.verified.iter().copied().collect();
        for p in verified {
            self.hello(p, false);
        }
    }

    pub(crate) fn tick(&mut self) {
        self.ticks += 1;
        for p in self.peers.clone() {
            let known = self.verified.contains(&p)
                || self.lost_peers.contains(&p)
                || self.foreign.contains_key(&p);
            let every = if self.is_member() && known {
                HELLO_MEMBER_TICKS
            } else {
                HELLO_RETRY_TICKS
            };
            if self.ticks.is_multiple_of(every) {
                self.hello(p, false);
            }
        }
    }

    /// A hello from `from`. Returns whether this replica just became a
    /// member (the node then starts consensus).
    pub(crate) fn on_hello(&mut self, from: ReplicaId, mut h: Hello) -> bool {
        if !self.peers.contains(&from) {
            return false;
        }
        let group = std::mem::take(&mut h.group);
        let voters = std::mem::take(&mut h.voters);
        let was_member = self.is_member();
        let reserved = self.reserved_heard.entry(from).or_insert(0);
        *reserved = (*reserved).max(h.reserved);
        if self.lost.is_some() {
            let marks = match h.state {
                MemberState::Member => (h.term, h.peer_seq, h.last_index, h.peer_reserved),
                MemberState::Joining | MemberState::Lost => {
                    self.lost_sources.remove(&from);
                    (0, 0, 0, h.peer_reserved)
                }
            };
            self.heard.insert(from, marks);
        }
        match h.state {
            MemberState::Lost => {
                self.lost_peers.insert(from);
                self.verified.remove(&from);
            }
            MemberState::Joining => {
                self.lost_peers.remove(&from);
                self.verified.remove(&from);
                self.joining_peers.insert(from, h.nonce);
                self.try_found();
            }
            MemberState::Member => {
                self.lost_peers.remove(&from);
                self.on_member(from, h.founders);
                self.follow_group(from, &group, &voters, h.conf_index);
            }
        }
        if !h.reply {
            self.hello(from, true);
        }
        !was_member && self.is_member()
    }

    /// Lost: a member of this cluster named its group. The group may have
    /// changed since this replica was configured (replicas added, others
    /// removed for good): the rebuild waits for the latest group named,
    /// not for the configured one. A group without this replica is not
    /// taken (it was removed, or is not added yet).
    fn follow_group(
        &mut self,
        from: ReplicaId,
        group: &[ReplicaId],
        voters: &[ReplicaId],
        conf_index: u64,
    ) {
        if self.lost.is_none()
            || !self.lost_sources.contains(&from)
            || conf_index <= self.named_conf
            || !group.contains(&self.me)
        {
            return;
        }
        self.named_conf = conf_index;
        let members: BTreeSet<ReplicaId> = group.iter().copied().collect();
        self.set_group(&members, voters.iter().copied().collect());
    }

    /// Lost, and following a group a member named: its configuration
    /// index, its members (this replica included) and its voters.
    pub(crate) fn followed_group(&self) -> Option<(u64, Vec<ReplicaId>, Vec<ReplicaId>)> {
        if self.lost.is_none() || self.named_conf == 0 {
            return None;
        }
        let mut members = self.peers.clone();
        members.push(self.me);
        members.sort_unstable();
        Some((
            self.named_conf,
            members,
            self.voters.iter().copied().collect(),
        ))
    }

    /// Every peer was heard joining: the founders are everyone's nonces.
    fn try_found(&mut self) {
        if self.identity.founders.is_some()
            || self.lost.is_some()
            || self
                .peers
                .iter()
                .any(|p| !self.joining_peers.contains_key(p))
        {
            return;
        }
        let mut founders: Vec<(ReplicaId, u64)> = self
            .joining_peers
            .iter()
            .filter(|(p, _)| self.peers.contains(p))
            .map(|(p, n)| (*p, *n))
            .collect();
        founders.push((self.me, self.identity.nonce));
        founders.sort_unstable();
        self.become_member(founders);
    }

    fn become_member(&mut self, founders: Vec<(ReplicaId, u64)>) {
        self.identity.founders = Some(founders);
        self.dirty = true;
        self.events.push(Event::Joined(self.identity.cluster_id()));
        self.hello_all();
    }

    /// Tell every peer where this replica stands now (they answer, which
    /// verifies them).
    fn hello_all(&mut self) {
        for p in self.peers.clone() {
            self.hello(p, false);
        }
    }

    fn on_member(&mut self, from: ReplicaId, founders: Vec<(ReplicaId, u64)>) {
        let mine = (self.me, self.identity.nonce);
        match self.identity.founders.clone() {
            Some(ours) => {
                if ours.is_empty() || founders.is_empty() || ours == founders {
                    self.verified.insert(from);
                    self.foreign.remove(&from);
                } else if !self.foreign.contains_key(&from) {
                    let why = format!(
                        "replica {from} belongs to another cluster (id {:016x}, this one is \
                         {:016x}): its messages are refused; check its data directory and the \
                         configured addresses",
                        cluster_id(&founders),
                        self.identity.cluster_id()
                    );
                    self.verified.remove(&from);
                    self.foreign.insert(from, why.clone());
                    self.events.push(Event::Foreign(from, why));
                }
            }
            None if founders.contains(&mine) => {
                // A founder that learnt the cluster from a peer.
                self.become_member(founders);
                self.verified.insert(from);
            }
            None if self.lost.is_none() && !founders.iter().any(|(r, _)| *r == self.me) => {
                let why = format!(
                    "replica {me} is new to its cluster (id {:016x}; replica {from} says it \
                     exists): it joins once added (`creek admin add-replica`), by installing a \
                     member's checkpoint, which starts once every configured peer has answered \
                     it; until then it does not vote or serve",
                    cluster_id(&founders),
                    me = self.me
                );
                self.lost = Some(why.clone());
                self.lost_founders = founders;
                self.lost_sources.insert(from);
                self.events.push(Event::Joining(why));
                self.hello_all();
            }
            None if self.lost.is_none() => {
                let why = format!(
                    "replica {me}'s data directory is new, but its cluster (id {:016x}) already \
                     exists without it (replica {from} says so): this replica lost its data. It \
                     does not vote, lead, acknowledge or serve until it is rebuilt from a \
                     member's checkpoint, which starts once every peer has answered it \
                     (docs/operations.md, \"Lost a disk\")",
                    if founders.is_empty() {
                        0
                    } else {
                        cluster_id(&founders)
                    },
                    me = self.me
                );
                if self.rejoin_when_lost {
                    self.events.push(Event::RejoinedDespiteLoss(why));
                    self.become_member(founders);
                    self.verified.insert(from);
                } else {
                    self.lost = Some(why.clone());
                    self.lost_founders = founders;
                    self.lost_sources.insert(from);
                    self.events.push(Event::Lost(why));
                    self.hello_all();
                }
            }
            None => {
                // Lost: remember the members to rebuild from.
                if founders == self.lost_founders || self.lost_sources.is_empty() {
                    self.lost_founders = founders;
                    self.lost_sources.insert(from);
                }
            }
        }
    }

    /// Check the invariants (sampled by the simulator).
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        if self.lost.is_some() && self.identity.founders.is_some() {
            return Err("a lost replica recorded founders".into());
        }
        if let Some(f) = &self.identity.founders {
            // A member added after the group formed is not a founder; one
            // that is must hold its founding nonce.
            let founder = f.iter().any(|(r, _)| *r == self.me);
            if founder && !f.contains(&(self.me, self.identity.nonce)) && !self.rejoin_when_lost {
                return Err("a founder that is not under its founding nonce".into());
            }
            if !f.windows(2).all(|w| w[0].0 < w[1].0) {
                return Err("founders not sorted by replica".into());
            }
        }
        if !self.verified.is_disjoint(&self.lost_peers) {
            return Err("a peer both verified and lost".into());
        }
        Ok(())
    }
}

/// Whether, in a group of `voters` of which `empty` hold no data, the rest
/// meet every majority (so each entry or op a majority acknowledged is held
/// by one of them): `voters - empty > voters - majority`, that is at most
/// half the voters empty.
fn holders_meet_every_quorum(voters: usize, empty: usize) -> bool {
    empty <= voters / 2
}

#[cfg(test)]
mod tests;
