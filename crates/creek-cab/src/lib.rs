//! Conditional atomic broadcast (CAB) of strong-op ids, built on the `raft`
//! crate (tikv/raft-rs), sans-IO.
//!
//! CAB orders strong-op ids only; payloads travel by gossip (paper §5,
//! indirect consensus). It evaluates two predicates of the replica: *holds*
//! (the op and the ops of its causal context have arrived here — indirect
//! consensus's "received") and *deps* (the paper's `check_dep`: additionally,
//! the context is in the causal set, i.e. its strong ops are delivered). The
//! library's log carries batches of ids ([`entry`]), and CAB adds three things
//! on top of it:
//!
//! * **No loss.** A leader proposes only ids it holds; a follower holds back
//!   an incoming append (it is not stepped into the library, exactly as if the
//!   network were slow) until it holds every id in it, and the caller pulls
//!   what is missing by gossip. So every log that contains an id — in
//!   particular every majority that decided it, and every future leader —
//!   holds its payload and causal context, and no undecided entry can wedge a
//!   new leader. (Acceptance cannot wait for *deps*: a lagging follower may
//!   receive a strong op together with the earlier strong ops of its context,
//!   which only their own delivery puts in the causal set.) An append held
//!   from a leader whose term has passed is dropped, never waited on: the
//!   library would refuse it, and its ids may never be held anywhere (their
//!   contexts may name ops lost with that leader's disk).
//! * **Conditional delivery.** Decided ids are delivered strictly in log
//!   order, each only once *deps* holds here; an id decided twice
//!   (re-proposed after a leader change) is delivered at its first place only,
//!   which every replica computes identically.
//! * **Casting from anywhere.** A non-leader forwards ids to the leader it
//!   knows; the caster re-forwards until the id is decided, so a lost forward
//!   or a leader change loses nothing.
//! * **Compaction without snapshots.** The leader tells every replica the
//!   *compaction point*: the last index every replica has acknowledged (its
//!   `matched` progress), so no replica can ever need an entry up to it from
//!   anyone. A replica compacts its log to at most that point and its own
//!   latest checkpoint ([`Cab::compact`]), and forgets the ids decided there.
//!   The log stays bounded while every replica keeps up; a replica that is
//!   down or far behind is left out of the point (it catches up by state
//!   transfer), except that one sent a snapshot holds the point at that
//!   snapshot's index until it caught up (or fell 4× the lag behind), so
//!   the leader's next snapshot to it is the same one and its fetch need
//!   not start over.
//!
//! Time and randomness are pinned: every replica has a fixed election timeout
//! (the library draws from `[election_tick, election_tick + 1)`), and the
//! caller drives [`Cab::tick`]. A run is reproducible from its inputs.
#![deny(missing_docs)]

mod cast;
mod compaction;
mod conf;
mod config;
mod delivery;
pub mod entry;
mod log_store;
mod messages;
mod persist;
mod snapshot;
pub mod storage;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use creek_core::{OpId, ReplicaId};
use creek_wire::CabMessage;
use raft::eraftpb::{EntryType, Message};
use raft::{RawNode, StateRole};
use rustc_hash::{FxHashMap, FxHashSet};

pub use compaction::ANNOUNCE_TICKS;
pub use conf::{
    members_of, voter_halves, voters_of, ChangeRefused, ConfApplied, MemberChange, PROMOTE_LAG,
};
pub use config::{CabConfig, CabError, COMPACTION_LAG_MAX};
pub use log_store::{Conf, LogBase, LogStore, LogWrites};
/// The consensus library's configuration (voters and learners by raft id).
pub use raft::eraftpb::ConfState;
pub use snapshot::SNAPSHOT_RETRY_TICKS;
pub use storage::{CabStorage, MemCabStorage};

/// A predicate of the replica over ids (*holds* or *deps*, see the crate
/// documentation).
pub type Deps<'a> = &'a dyn Fn(OpId) -> bool;

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CabStats {
    /// Library messages sent and their encoded bytes.
    pub raft_msgs_sent: u64,
    /// Bytes of library messages sent.
    pub raft_bytes_sent: u64,
    /// Forward messages sent.
    pub forwards_sent: u64,
    /// Log entries proposed by this node as leader.
    pub entries_proposed: u64,
    /// Ids proposed by this node as leader.
    pub ids_proposed: u64,
    /// Distinct ids decided.
    pub ids_decided: u64,
    /// Decided ids skipped because decided before (re-proposals).
    pub duplicates_decided: u64,
    /// Appends held back for missing payloads (cumulative).
    pub appends_held: u64,
    /// Appends dropped because the hold queue was full.
    pub appends_dropped: u64,
    /// Held appends dropped because their leader's term had passed (see
    /// `Cab::drop_stale_held`).
    pub stale_appends_dropped: u64,
    /// Incoming messages refused (malformed, misaddressed, unsupported).
    pub refused: u64,
    /// Ids delivered.
    pub delivered: u64,
}

/// What a CAB node hands its caller after a turn ([`Cab::ready`]).
#[derive(Debug, Default)]
#[must_use = "a CabReady carries messages and decided ids the caller must act on"]
pub struct CabReady {
    /// Messages that may leave before the writes this node made are
    /// durable, in order: a leader's appends and heartbeats, which the
    /// library lets go at once (raft thesis §10.2.1: the leader writes its
    /// log in parallel with its followers, and counts itself only once
    /// [`Cab::on_persisted`] reports its write), and ids forwarded to the
    /// leader (they claim nothing about this disk). Empty on a synchronous
    /// store, whose writes are durable when made.
    pub early: Vec<(ReplicaId, CabMessage)>,
    /// Everything else — votes, acknowledgements, compaction points — in
    /// order: it waits for the writes made before it.
    pub messages: Vec<(ReplicaId, CabMessage)>,
    /// Ids decided since the last turn, in log order, each at its first
    /// occurrence: deliver them in that order under *deps*, then report
    /// with [`Cab::advance`].
    pub decided: Vec<OpId>,
    /// Configuration changes applied since the last turn, in log order.
    pub conf_applied: Vec<ConfApplied>,
}

/// The raft id of a replica (raft reserves 0).
pub fn raft_id(r: ReplicaId) -> u64 {
    u64::from(r.0) + 1
}

fn replica_of(id: u64) -> Option<ReplicaId> {
    id.checked_sub(1)
        .and_then(|v| u16::try_from(v).ok())
        .map(ReplicaId)
}

/// One CAB node.
pub struct Cab<S: CabStorage> {
    config: CabConfig,
    node: RawNode<S>,
    /// Leader only: ids to propose, in arrival order.
    pending: VecDeque<OpId>,
    /// Ids in `pending` or proposed by this leader and not yet decided.
    in_flight: FxHashSet<OpId>,
    /// Ids cast here and not yet decided, with the tick of the last forward.
    unconfirmed: BTreeMap<OpId, u64>,
    /// Ids to forward to the leader at the next poll.
    to_forward: Vec<OpId>,
    /// Appends waiting for payloads, in arrival order.
    held: VecDeque<Message>,
    /// The first id of the first held append that the caller did not hold
    /// when last asked, in that append's first entry: until the caller
    /// holds it, nothing held can go, and polls skip the walk over the held
    /// entries and their causal contexts.
    held_blocker: Option<OpId>,
    /// The term `held` was last checked for appends of a past term (see
    /// `drop_stale_held`): appends are held only in or past the term of
    /// their arrival, so they go stale only when the term moves.
    held_term: u64,
    /// A snapshot from the leader, held until the caller's state covers its
    /// index (state transfer): `(sender, message)`.
    held_snapshot: Option<(ReplicaId, Message)>,
    /// Leader: followers (raft ids) the library is sending a snapshot, with
    /// the library tick it started.
    snapshots_out: FxHashMap<u64, u64>,
    /// Leader: followers sent a snapshot and not yet caught up to it (raft
    /// id → the snapshot's index), which hold the compaction point there
    /// (see [`compaction::compaction_point`]), also between a retry's
    /// report and the library's next send, and while the follower is down
    /// (then only up to `SNAPSHOT_HOLD` times the lag).
    fetch_holds: FxHashMap<u64, u64>,
    /// The library's ticks.
    raft_ticks: u64,
    /// A replica rebuilt after it lost its data: until its commit index
    /// reaches this, it neither campaigns nor grants a vote to a candidate
    /// whose log ends before it (see [`Cab::catch_up_to`]).
    catch_up_to: u64,
    /// Decided ids waiting for conditional delivery, in log order, with the
    /// index of their entry.
    decided: VecDeque<(OpId, u64)>,
    /// The ids decided in the log this node holds (first occurrences), with
    /// their entry's index: compaction forgets those of compacted entries.
    /// An id decided again after that is delivered again, and the replica
    /// ignores it as committed (`Replica::cab_deliver`).
    seen: FxHashMap<OpId, u64>,
    /// The highest compaction point known (see the crate documentation):
    /// the leader's own, or the latest a leader announced.
    compactable: u64,
    /// Leader: the compaction point last announced, and when (in ticks).
    announced: (u64, u64),
    /// The last log index whose entry was decided here (committed entries
    /// arrive once each, in log order: asserted in `decide`).
    decided_through: u64,
    /// The entry index of the last id delivered (delivery follows the
    /// decided order: asserted in `advance`).
    delivered_index: u64,
    /// How many ids at the front of `decided` [`Cab::ready`] handed over
    /// (the caller delivers them, or they wait there for *deps*).
    handed: usize,
    ticks: u64,
    /// The library ticks once every `tick_scale` calls of [`Cab::tick`].
    tick_scale: u64,
    /// Calls of [`Cab::tick`] since the library last ticked.
    sub_ticks: u64,
    was_leader: bool,
    out: Vec<(ReplicaId, CabMessage)>,
    /// Messages that may leave before this node's pending writes are
    /// durable (see [`CabReady::early`]).
    early: Vec<(ReplicaId, CabMessage)>,
    /// The library's number of the last `Ready` whose writes the store
    /// holds, and of the last one the driver reported durable (see
    /// [`Cab::on_persisted`]).
    written_ready: u64,
    persisted_ready: u64,
    stats: CabStats,
    failed: Option<String>,
    /// The replicas of the applied configuration (voters and learners).
    group: BTreeSet<ReplicaId>,
    /// Configuration changes applied and not yet taken.
    conf_out: Vec<ConfApplied>,
}

impl<S: CabStorage> Cab<S> {
    /// Start (or restart) a node on `storage`. `applied` is the last log
    /// index whose ids the caller has already consumed (0 on a fresh start);
    /// decided ids after it are delivered again.
    pub fn new(config: CabConfig, storage: S, applied: u64) -> Result<Self, CabError> {
        config.validate()?;
        let raft_config = raft::Config {
            id: raft_id(config.me),
            election_tick: config.election_tick,
            heartbeat_tick: config.heartbeat_tick,
            min_election_tick: config.election_tick,
            max_election_tick: config.election_tick + 1,
            applied,
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: config.inflight_msgs_max,
            check_quorum: true,
            pre_vote: true,
            ..raft::Config::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        // Ids decided before `applied` are not delivered again; remember them
        // so a later re-proposal of one of them is recognised as a duplicate.
        let mut seen = FxHashMap::default();
        let first = storage.first_index()?;
        if applied >= first {
            let ctx = raft::GetEntriesContext::empty(false);
            for e in storage.entries(first, applied + 1, None, ctx)? {
                if e.get_entry_type() == EntryType::EntryNormal {
                    for id in entry::decode_ids(&e.data).unwrap_or_default() {
                        seen.entry(id).or_insert(e.index);
                    }
                }
            }
        }
        let group = members_of(&storage.conf().state);
        let node = RawNode::new(&raft_config, storage, &logger)?;
        Ok(Cab {
            config,
            node,
            pending: VecDeque::new(),
            in_flight: FxHashSet::default(),
            unconfirmed: BTreeMap::new(),
            to_forward: Vec::new(),
            held: VecDeque::new(),
            held_blocker: None,
            held_term: 0,
            held_snapshot: None,
            snapshots_out: FxHashMap::default(),
            fetch_holds: FxHashMap::default(),
            raft_ticks: 0,
            catch_up_to: 0,
            decided: VecDeque::new(),
            seen,
            compactable: 0,
            announced: (0, 0),
            decided_through: applied,
            delivered_index: applied,
            handed: 0,
            ticks: 0,
            tick_scale: 1,
            sub_ticks: 0,
            was_leader: false,
            out: Vec::new(),
            early: Vec::new(),
            written_ready: 0,
            persisted_ready: 0,
            stats: CabStats::default(),
            failed: None,
            group,
            conf_out: Vec::new(),
        })
    }

    /// Stretch CAB's timing (election timeout, heartbeat interval, forward
    /// retries) by `scale`: from now on the library ticks once every `scale`
    /// calls of [`Cab::tick`]. Drivers set it from the measured round trip
    /// (`creek_node`'s link timing), so elections can finish on slow links.
    /// Timing only decides liveness, never safety.
    pub fn set_tick_scale(&mut self, scale: u64) {
        self.tick_scale = scale.max(1);
    }

    /// Advance logical time by one tick (see [`Cab::set_tick_scale`]).
    pub fn tick(&mut self) {
        if self.failed.is_some() {
            return;
        }
        self.sub_ticks += 1;
        if self.sub_ticks < self.tick_scale {
            return;
        }
        self.sub_ticks = 0;
        self.ticks += 1;
        self.node.tick();
        self.raft_ticks += 1;
        self.retry_snapshots();
        let retry = self.config.forward_retry_ticks;
        let due: Vec<OpId> = self
            .unconfirmed
            .iter()
            .filter(|(_, last)| self.ticks - **last >= retry)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.unconfirmed.insert(id, self.ticks);
            if !self.in_flight.contains(&id) {
                self.route(id);
            }
        }
        self.announce_compaction();
        self.promote_caught_up();
    }

    /// Start an election now (tests and operators).
    pub fn campaign(&mut self) {
        let _ = self.node.campaign();
    }

    /// Do all pending work: release held appends whose payloads arrived,
    /// propose held ids, forward, run the library's Ready loop. What it
    /// produces waits for [`Cab::ready`].
    pub(crate) fn poll(&mut self, holds: Deps<'_>) {
        if self.failed.is_none() {
            self.release_held(holds);
            self.propose(holds);
            self.forward();
            if let Err(e) = self.handle_ready() {
                self.failed = Some(e);
            }
        }
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<ReplicaId> {
        match self.node.raft.leader_id {
            raft::INVALID_ID => None,
            id => replica_of(id),
        }
    }

    /// This node's consensus role: `leader`, `follower`, `candidate` or
    /// `pre-candidate`.
    pub fn role(&self) -> &'static str {
        match self.node.raft.state {
            StateRole::Leader => "leader",
            StateRole::Follower => "follower",
            StateRole::Candidate => "candidate",
            StateRole::PreCandidate => "pre-candidate",
        }
    }

    /// Whether this node is the leader.
    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// Where this node's log stands: (last index, its term, commit index). A
    /// change says [`Cab::undecided_log`] may have changed.
    pub fn log_mark(&self) -> (u64, u64, u64) {
        let log = &self.node.raft.raft_log;
        (log.last_index(), log.last_term(), log.committed)
    }

    /// Cast ids not yet decided.
    pub fn unconfirmed(&self) -> usize {
        self.unconfirmed.len()
    }

    /// Counters.
    pub fn stats(&self) -> CabStats {
        self.stats
    }

    /// What stopped this node, if anything: a storage write that failed, or
    /// a leader's commit index past the end of this log (this replica lost
    /// data it acknowledged). A stopped node takes no more input and sends
    /// nothing; its driver should take the replica down.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// The storage (for restarts in tests and for the server).
    pub fn store(&self) -> &S {
        self.node.store()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use protobuf::Message as _;
    use raft::eraftpb::MessageType;
    use raft::Storage as _;

    fn follower(me: u16) -> Cab<MemCabStorage> {
        let group: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
        let voters = group.iter().map(|r| raft_id(*r)).collect();
        let config = CabConfig::for_group(ReplicaId(me), &group);
        Cab::new(config, MemCabStorage::new(voters), 0).expect("valid config")
    }

    fn heartbeat(from: u16, to: u16, term: u64, commit: u64) -> CabMessage {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = raft_id(ReplicaId(from));
        m.to = raft_id(ReplicaId(to));
        m.term = term;
        m.commit = commit;
        CabMessage::Raft(Bytes::from(m.write_to_bytes().expect("encodes")))
    }

    /// An append of `from`'s in `term` after `(index, log_term)`, of one
    /// entry at `index + 1` naming `ids`.
    fn append(
        from: u16,
        to: u16,
        term: u64,
        index: u64,
        log_term: u64,
        ids: &[OpId],
    ) -> CabMessage {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.from = raft_id(ReplicaId(from));
        m.to = raft_id(ReplicaId(to));
        m.term = term;
        m.index = index;
        m.log_term = log_term;
        let e = raft::eraftpb::Entry {
            index: index + 1,
            term,
            data: entry::encode_ids(ids).into(),
            ..Default::default()
        };
        m.set_entries(vec![e].into());
        CabMessage::Raft(Bytes::from(m.write_to_bytes().expect("encodes")))
    }

    fn snapshot(from: u16, to: u16, term: u64, index: u64) -> CabMessage {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        m.from = raft_id(ReplicaId(from));
        m.to = raft_id(ReplicaId(to));
        m.term = term;
        let snap = m.mut_snapshot();
        snap.data = 0u64.to_le_bytes().to_vec().into();
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(ConfState::from((
            (1..=3).map(|r| raft_id(ReplicaId(r))).collect::<Vec<_>>(),
            vec![],
        )));
        CabMessage::Raft(Bytes::from(m.write_to_bytes().expect("encodes")))
    }

    /// Messages are taken from the other members only: a forward that claims
    /// a replica outside the group, or this replica itself, cannot make the
    /// leader order an id.
    #[test]
    fn a_leader_proposes_forwarded_ids_only_from_other_members() {
        let me = ReplicaId(1);
        let config = CabConfig::for_group(me, &[me]);
        let mut cab = Cab::new(config, MemCabStorage::new(vec![raft_id(me)]), 0).expect("valid");
        cab.campaign();
        cab.poll(&|_| true);
        assert!(cab.is_leader());
        let last = |cab: &Cab<MemCabStorage>| cab.store().last_index().expect("reads");
        let before = last(&cab);
        let id = OpId::new(ReplicaId(2), 7);
        for from in [ReplicaId(9), me] {
            cab.on_message(from, CabMessage::Forward { ids: vec![id] }, &|_| true);
            cab.poll(&|_| true);
        }
        assert_eq!(last(&cab), before, "a forward from outside was proposed");
        cab.cast(id);
        cab.poll(&|_| true);
        assert_eq!(last(&cab), before + 1, "its own cast is proposed");
    }

    /// Consensus messages and compaction announcements from outside the
    /// group, or in this replica's own name, change nothing and are counted.
    #[test]
    fn raft_and_compaction_messages_are_taken_only_from_other_members() {
        let mut cab = follower(2);
        let refused = cab.stats().refused;
        for from in [9, 2] {
            cab.on_message(ReplicaId(from), heartbeat(from, 2, 5, 0), &|_| true);
            cab.on_message(
                ReplicaId(from),
                CabMessage::Compact { through: 10 },
                &|_| true,
            );
            cab.poll(&|_| true);
        }
        assert_eq!(cab.term(), 0, "a heartbeat from outside moved the term");
        assert_eq!(
            cab.compactable(),
            0,
            "an announcement from outside was taken"
        );
        assert_eq!(cab.stats().refused, refused + 4);
        cab.on_message(ReplicaId(1), heartbeat(1, 2, 5, 0), &|_| true);
        cab.on_message(ReplicaId(1), CabMessage::Compact { through: 10 }, &|_| true);
        cab.poll(&|_| true);
        assert_eq!(
            (cab.term(), cab.compactable()),
            (5, 10),
            "a member's are taken"
        );
    }

    /// A snapshot is held while the caller fetches a checkpoint for it, and
    /// installed only if the library still takes it: a newer term began
    /// meanwhile, so it is refused and the log stays as it was (the caller
    /// keeps its state; a checkpoint ahead of the log could not restart).
    #[test]
    fn a_held_snapshot_is_installed_only_if_the_library_still_takes_it() {
        let mut cab = follower(2);
        cab.on_message(ReplicaId(1), snapshot(1, 2, 5, 100), &|_| true);
        assert_eq!(cab.wanted_snapshot(), Some((ReplicaId(1), 100)));
        cab.on_message(ReplicaId(3), heartbeat(3, 2, 6, 0), &|_| true);
        assert!(!cab.install_snapshot(), "a newer term began");
        assert_eq!(cab.wanted_snapshot(), None);
        cab.poll(&|_| true);
        assert_eq!(cab.store().last_index().expect("reads"), 0);

        cab.on_message(ReplicaId(3), snapshot(3, 2, 6, 120), &|_| true);
        assert_eq!(cab.wanted_snapshot(), Some((ReplicaId(3), 120)));
        assert!(cab.install_snapshot());
        cab.poll(&|_| true);
        assert_eq!(cab.store().last_index().expect("reads"), 120);
        assert_eq!(cab.store().first_index().expect("reads"), 121);
    }

    /// The caller stores its checkpoint in its next write, right after
    /// `install_snapshot`: the log must already restart at the snapshot's
    /// index then, with no poll in between, or the checkpoint could reach
    /// the disk ahead of the log it restarts from.
    #[test]
    fn an_installed_snapshot_is_in_the_store_when_install_returns() {
        let mut cab = follower(2);
        cab.on_message(ReplicaId(1), snapshot(1, 2, 5, 100), &|_| true);
        assert!(cab.install_snapshot());
        let store = cab.store();
        assert_eq!(store.first_index().expect("reads"), 101);
        assert_eq!(store.last_index().expect("reads"), 100);
        let hs = store.initial_state().expect("reads").hard_state;
        assert_eq!(hs.commit, 100);
    }

    /// The bug report's case: a replica whose data directory was wiped
    /// restarts with an empty log, and the leader's heartbeat says 3371
    /// entries it acknowledged are committed. The library would panic; CAB
    /// stops with the cause instead.
    #[test]
    fn a_heartbeat_committing_past_the_log_stops_cab_with_lost_data() {
        let mut cab = follower(2);
        cab.on_message(ReplicaId(1), heartbeat(1, 2, 7, 3371), &|_| true);
        let why = cab.failure().expect("CAB stopped");
        assert!(why.contains("replica 1"), "{why}");
        assert!(why.contains("up to index 3371"), "{why}");
        assert!(why.contains("log ends at 0"), "{why}");
        assert!(why.contains("lost data it acknowledged"), "{why}");
        assert_eq!(cab.stats().refused, 1);
        // Stopped: nothing more goes in or out.
        cab.on_message(ReplicaId(1), heartbeat(1, 2, 7, 0), &|_| true);
        cab.tick();
        cab.poll(&|_| true);
        assert!(cab.ready(&|_| true).messages.is_empty());
        assert_eq!(cab.term(), 0, "the heartbeat was not stepped");
    }

    /// An append held for an id this replica does not hold, from a leader
    /// whose term has passed, does not hold up the appends of the current
    /// leader behind it: the library would refuse it anyway. (Seed 200493:
    /// the old leader lost its disk with the payload of an op its last
    /// appends' ops named in their contexts; the followers held those
    /// appends, every append of the next leader waited behind them, and
    /// the void op that would have let them through was never ordered.)
    #[test]
    fn a_held_append_of_a_past_term_does_not_block_the_current_leader() {
        let mut cab = follower(2);
        let lost = OpId::new(ReplicaId(1), 267);
        let fresh = OpId::new(ReplicaId(3), 5);
        let holds = move |id: OpId| id != lost;
        cab.on_message(ReplicaId(1), append(1, 2, 1, 0, 0, &[lost]), &holds);
        cab.poll(&holds);
        assert_eq!(cab.held_appends(), 1, "held for the missing payload");
        // Replica 3 is elected in term 2 and appends its own first entry.
        cab.on_message(ReplicaId(3), heartbeat(3, 2, 2, 0), &holds);
        cab.on_message(ReplicaId(3), append(3, 2, 2, 0, 0, &[fresh]), &holds);
        cab.poll(&holds);
        assert_eq!(cab.term(), 2);
        assert_eq!(
            cab.held_appends(),
            0,
            "the stale append still holds the queue"
        );
        assert_eq!(cab.stats().stale_appends_dropped, 1);
        assert_eq!(cab.store().last_index().expect("reads"), 1);
        assert_eq!(
            cab.store().term(1).expect("reads"),
            2,
            "the new leader's entry"
        );
        // A late append of the old term is not held either.
        cab.on_message(ReplicaId(1), append(1, 2, 1, 0, 0, &[lost]), &holds);
        assert_eq!(cab.held_appends(), 0);
    }

    /// A heartbeat within the log is stepped as usual (the follower answers
    /// it); one from a stale term is the library's to ignore.
    #[test]
    fn heartbeats_within_the_log_or_from_a_stale_term_do_not_stop_cab() {
        let mut cab = follower(2);
        cab.on_message(ReplicaId(1), heartbeat(1, 2, 7, 0), &|_| true);
        cab.poll(&|_| true);
        assert_eq!(cab.failure(), None);
        assert_eq!(cab.term(), 7);
        assert_eq!(cab.leader(), Some(ReplicaId(1)));
        assert!(
            !cab.ready(&|_| true).messages.is_empty(),
            "the heartbeat is answered"
        );

        cab.on_message(ReplicaId(3), heartbeat(3, 2, 6, 3371), &|_| true);
        cab.poll(&|_| true);
        assert_eq!(cab.failure(), None);
        assert_eq!(cab.term(), 7);
    }
}
